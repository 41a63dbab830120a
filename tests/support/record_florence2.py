"""References for the florence2 fixture (families_florence2.py rebuilds the same seeded model):

- ``references/pipeline_florence2.json`` ``generate``: for each scikit-image photo x task token
  (and text), greedy and beam (generation_config.json's num_beams 3, no_repeat_ngram_size 3,
  forced bos / eos, early_stopping) with max_new_tokens 20: transformers' Florence2Processor
  inputs, ``model.generate``'s ids, ``batch_decode(skip_special_tokens=False)`` and
  ``post_process_generation(text, task=, image_size=(width, height))``. Each greedy run is also
  compared with onnxruntime over the fixture's four graphs (vision_encoder -> embed_tokens ->
  encoder_model -> decoder_model_merged): the ORT loop here is plain argmax, so it must equal
  ``generate`` run without the forced bos / eos and no-repeat processors (``ort_greedy``;
  the script stops if it does not).
- ``real_tokenizer``: with the real Florence-2-base tokenizer files (read from
  ../shared/hub-files), every task token's prompt ids and the decoding of the hand-written
  generations below.
- ``parse``: post_process_generation on hand-written generation strings (a random model's text
  is gibberish) for every answer type, at image sizes whose bin centres fall near integers.

Usage (export environment):

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/record_florence2.py
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import export_common as ec  # noqa: E402
import families_florence2 as ff  # noqa: E402

FIXTURE = ec.FIXTURES_ROOT / ff.NAME
NEW_TOKENS = 20
TASKS = [("<CAPTION>", None), ("<OD>", None), ("<OCR_WITH_REGION>", None),
         ("<CAPTION_TO_PHRASE_GROUNDING>", "a cat on a mat")]
PHOTOS = ("astronaut", "chelsea", "coffee")
# hand-written generations, one or more per answer type (with the task that parses them)
PARSE_CASES = [
    ("<CAPTION>", "</s><s>A cat sitting on a mat.</s>"),
    ("<OCR>", "</s><s>HELLO<pad> WORLD</s>"),
    ("<OD>", "</s><s>car<loc_52><loc_333><loc_932><loc_774>door<loc_110><loc_420><loc_250>"
             "<loc_690>door<loc_600><loc_410><loc_780><loc_700></s>"),
    ("<OD>", "</s><s>person<loc_0><loc_0><loc_999><loc_999><loc_10><loc_20><loc_30><loc_40>"
             "wheel<loc_1><loc_2><loc_3></s>"),
    ("<DENSE_REGION_CAPTION>", "</s><s>a red car parked<loc_100><loc_200><loc_300><loc_400>"
                               "caf\u00e9 sign<loc_5><loc_6><loc_7><loc_8></s>"),
    ("<REGION_PROPOSAL>", "</s><s><loc_12><loc_34><loc_560><loc_780><loc_1><loc_2><loc_3>"
                          "<loc_4></s>"),
    ("<OCR_WITH_REGION>", "</s><s>STOP<loc_100><loc_100><loc_300><loc_100><loc_300><loc_200>"
                          "<loc_100><loc_200>Main St.<loc_500><loc_500><loc_900><loc_510>"
                          "<loc_890><loc_600><loc_495><loc_590></s>"),
    ("<CAPTION_TO_PHRASE_GROUNDING>", "</s><s>A cat<loc_10><loc_20><loc_500><loc_600>a mat"
                                      "<loc_0><loc_700><loc_999><loc_999><loc_5><loc_6><loc_7>"
                                      "<loc_8>it<loc_1><loc_2><loc_3><loc_4>the image<loc_1>"
                                      "<loc_2><loc_3><loc_4></s>"),
    ("<REFERRING_EXPRESSION_SEGMENTATION>", "</s><s><loc_100><loc_200><loc_300><loc_200>"
                                            "<loc_300><loc_400><loc_100><loc_401></s>"),
    ("<REGION_TO_SEGMENTATION>", "</s><s><poly><loc_1><loc_2><loc_3><loc_4><loc_5><loc_6>"
                                 "</poly><poly><loc_7><loc_8><loc_9><loc_10><sep><loc_11>"
                                 "<loc_12><loc_13><loc_14><loc_15></poly></s>"),
    ("<OPEN_VOCABULARY_DETECTION>", "</s><s>green car<loc_52><loc_333><loc_932><loc_774>"
                                    "</s>"),
    ("<OPEN_VOCABULARY_DETECTION>", "</s><s>green car<poly><loc_52><loc_333><loc_932>"
                                    "<loc_774><loc_60><loc_340></poly></s>"),
    ("<REGION_TO_CATEGORY>", "</s><s>car<loc_52><loc_333><loc_932><loc_774></s>"),
    ("free prompt", "</s><s>anything<loc_1></s>"),
]
PROMPT_TASKS = ["<OCR>", "<OCR_WITH_REGION>", "<CAPTION>", "<DETAILED_CAPTION>",
                "<MORE_DETAILED_CAPTION>", "<OD>", "<DENSE_REGION_CAPTION>", "<REGION_PROPOSAL>",
                "<CAPTION_TO_PHRASE_GROUNDING>", "<REFERRING_EXPRESSION_SEGMENTATION>",
                "<REGION_TO_SEGMENTATION>", "<OPEN_VOCABULARY_DETECTION>", "<REGION_TO_CATEGORY>",
                "<REGION_TO_DESCRIPTION>", "<REGION_TO_OCR>"]
SIZES = [(640, 480), (451, 300), (1000, 1000), (333, 777), (10, 7)]


def processor():
    from transformers import Florence2Processor

    return Florence2Processor.from_pretrained(FIXTURE)


def ort_greedy(proc, image, prompt_ids, steps):
    """Plain argmax over the fixture's graphs on onnxruntime (no logits processors)."""
    s = {g: ec.ort_session(FIXTURE / "onnx" / f"{g}.onnx") for g in
         ("vision_encoder", "embed_tokens", "encoder_model", "decoder_model_merged")}
    pv = proc.image_processor(images=[image], return_tensors="np")["pixel_values"]
    feats = s["vision_encoder"].run(None, {"pixel_values": pv.astype(np.float32)})[0]
    text = s["embed_tokens"].run(None, {"input_ids": np.array([prompt_ids], np.int64)})[0]
    embeds = np.concatenate([feats, text], 1)
    mask = np.ones(embeds.shape[:2], np.int64)
    states = s["encoder_model"].run(None, {"inputs_embeds": embeds, "attention_mask": mask})[0]
    dec = s["decoder_model_merged"]
    names = [o.name for o in dec.get_outputs()]
    ids, feeds = [2], {"use_cache_branch": np.array([False]), **ff.empty_past(1, 0)}
    for _ in range(steps):
        feeds.update(inputs_embeds=s["embed_tokens"].run(None, {"input_ids": np.array([[ids[-1]]])})[0],
                     encoder_attention_mask=mask, encoder_hidden_states=states)
        out = dict(zip(names, dec.run(names, feeds)))
        ids.append(int(out["logits"][0, -1].argmax()))
        past = {n: out[n.replace("past_key_values", "present")] for n in ff.past_names()}
        if feeds["use_cache_branch"][0]:
            past.update({n: feeds[n] for n in ff.past_names() if ".encoder." in n})
        feeds = {"use_cache_branch": np.array([True]), **past}
        if ids[-1] == 2:
            break
    return ids


def generate_cases(m, proc):
    cases = []
    for name in PHOTOS:
        image = ff.images()[PHOTOS.index(name)]
        for task, text in TASKS:
            inputs = proc(text=task + (text or ""), images=image, return_tensors="pt")
            prompt_ids = [i for i in inputs["input_ids"][0].tolist()
                          if i != proc.tokenizer.image_token_id]
            case = {"image": name, "image_size": list(image.size), "task": task, "text": text,
                    "prompt_ids": prompt_ids, "runs": {}}
            for mode, options in (("greedy", {"num_beams": 1}), ("beam", {})):
                with torch.no_grad():
                    ids = m.generate(**inputs, max_new_tokens=NEW_TOKENS, **options)[0].tolist()
                decoded = proc.batch_decode([ids], skip_special_tokens=False)[0]
                parsed = proc.post_process_generation(decoded, task=task, image_size=image.size)
                case["runs"][mode] = {"options": options, "ids": ids, "text": decoded,
                                      "parsed": parsed}
            with torch.no_grad():  # plain argmax: what the onnxruntime loop computes
                plain = m.generate(**inputs, max_new_tokens=NEW_TOKENS, num_beams=1,
                                   no_repeat_ngram_size=0, forced_bos_token_id=None,
                                   forced_eos_token_id=None)[0].tolist()
            ort = ort_greedy(proc, image, prompt_ids, NEW_TOKENS)
            if ort != plain:
                raise AssertionError(f"{name} {task}: onnxruntime {ort} != PyTorch {plain}")
            case["ort_greedy"] = ort
            cases.append(case)
    return cases


def parse_cases(proc):
    out = []
    for task, text in PARSE_CASES:
        for size in SIZES:
            out.append({"task": task, "text": text, "image_size": list(size),
                        "parsed": proc.post_process_generation(text, task=task, image_size=size)})
    return out


def real_tokenizer_cases(proc):
    """The real Florence-2-base tokenizer (../shared/hub-files, read, not copied): each task's
    prompt ids (Florence2Processor's prompt table and tokenization) and the decoding, special
    tokens kept, of the hand-written generations."""
    from transformers import BartTokenizerFast

    tok = BartTokenizerFast.from_pretrained(ff.HUB)
    prompts = []
    for task in [*PROMPT_TASKS, "a free prompt"]:
        for text in (None, "a green car", "<loc_100><loc_200><loc_300><loc_400>"):
            if text is not None and task not in proc.task_prompts_with_input:
                continue
            if text is None and task in proc.task_prompts_with_input:
                continue
            prompt = proc._construct_prompts([task + (text or "")])[0]
            ids = tok(f"<s>{prompt}</s>", add_special_tokens=False)["input_ids"]
            prompts.append({"task": task, "text": text, "ids": ids})
    decoded = []
    for _, text in PARSE_CASES:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        decoded.append({"ids": ids, "text": tok.decode(ids, skip_special_tokens=False)})
    return {"prompts": prompts, "decode": decoded}


def main():
    import tempfile

    with tempfile.TemporaryDirectory() as work:
        m = ff.model(ff.tokenizer(Path(work)))
    proc = processor()
    record = {"transformers": __import__("transformers").__version__,
              "max_new_tokens": NEW_TOKENS, "generate": generate_cases(m, proc),
              "parse": parse_cases(proc), "real_tokenizer": real_tokenizer_cases(proc)}
    path = FIXTURE / "references/pipeline_florence2.json"
    path.write_text(json.dumps(ec.to_jsonable(record), indent=1, ensure_ascii=False) + "\n")
    print(f"{path}: {len(record['generate'])} generate cases, {len(record['parse'])} parse cases")


if __name__ == "__main__":
    main()
