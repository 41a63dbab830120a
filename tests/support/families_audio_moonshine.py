"""A tiny Moonshine fixture for automatic-speech-recognition (encoder + merged decoder).

  * moonshine  MoonshineForConditionalGeneration with random weights (hidden 32, 2 + 2 layers), a
               byte-fallback BPE tokenizer in Llama's layout (<unk> 0, <s> 1, </s> 2, as
               UsefulSensors/moonshine-* number them), the Wav2Vec2FeatureExtractor Moonshine ships
               (raw 16 kHz samples, no normalization, attention mask); exported by optimum-onnx's
               main_export (task automatic-speech-recognition-with-past) to onnx/encoder_model.onnx
               and onnx/decoder_model_merged.onnx, the layout of onnx-community/moonshine-*-ONNX.

Same conventions as families_vision_audio.py (whose helpers this script imports): seeded and perturbed
weights, onnxruntime references on the seeded sine clips (references/encoder_model.npz,
references/decoder_model_merged.npz: the prompt step and 3 KV-cache steps), the torch model checked
against the exported graphs (1e-4) before anything is recorded, manifest.json. The transformers
pipeline reference (references/pipeline_automatic-speech-recognition.json) is written in
record_audio_pipelines.py's cases format, on the committed speech.

Usage (export environment, plus ``pip install soundfile``):

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/families_audio_moonshine.py

Pinned versions: those of families_vision_audio.py (requirements-export.txt), soundfile 0.14.0.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    # same as families_vision_audio.py: optimum picks some names from Python sets
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable, *sys.argv])

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import export_common as ec  # noqa: E402
import families_vision_audio as fva  # noqa: E402
import record_audio_pipelines as rap  # noqa: E402

NAME, TASK = "moonshine", "automatic-speech-recognition"
GREEDY = {"do_sample": False, "num_beams": 1, "max_new_tokens": 10}
BYTES_END = 3 + 256  # <unk> <s> </s>, then <0x00> ... <0xFF> (sentencepiece byte_fallback)


def moonshine_tokenizer(tmp: Path):
    """Byte-fallback BPE in Llama's layout (<unk> 0, <s> 1, </s> 2), as moonshine-* number them."""
    from transformers import LlamaTokenizerFast

    spm = ec.train_sentencepiece(
        tmp / "tokenizer.model", 400, "bpe", byte_fallback=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        split_digits=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
    )
    tok = LlamaTokenizerFast(vocab_file=str(spm), legacy=True, add_prefix_space=True, add_bos_token=True,
                             model_max_length=512, pad_token="</s>", padding_side="right")
    assert tok.convert_ids_to_tokens([0, 1, 2, 3, BYTES_END - 1, BYTES_END]) [:5] == \
        ["<unk>", "<s>", "</s>", "<0x00>", "<0xFF>"], tok.convert_ids_to_tokens(list(range(5)))
    return tok


def feature_extractor():
    """UsefulSensors/moonshine-*'s preprocessor: raw samples at 16 kHz, no normalization, attention mask."""
    from transformers import Wav2Vec2FeatureExtractor

    return Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=False,
                                    return_attention_mask=True, padding_side="right")


def build_model(tok):
    from transformers import MoonshineConfig, MoonshineForConditionalGeneration

    cfg = MoonshineConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, encoder_num_hidden_layers=2,
        decoder_num_hidden_layers=2, encoder_num_attention_heads=2, decoder_num_attention_heads=2,
        decoder_start_token_id=1, bos_token_id=1, eos_token_id=2, pad_token_id=2,
        architectures=["MoonshineForConditionalGeneration"],
    )
    fva.seed(0)
    model = fva.perturb(MoonshineForConditionalGeneration(cfg).eval(), 0.2)
    with torch.no_grad():  # tied embedding: let word pieces win greedy decoding over the specials
        model.model.decoder.embed_tokens.weight[:BYTES_END] *= 0.25  # and the 256 byte-fallback tokens
    return model


# ---- references ------------------------------------------------------------------------------------


def _encoder_feeds(sess, fe, clips):
    feats = fe(clips, sampling_rate=16000, padding=True, return_attention_mask=True, return_tensors="np")
    return fva.cast_feeds(sess, {"input_values": feats["input_values"], "attention_mask": feats["attention_mask"]})


def _decoder_first(sess, enc_feeds, states, start):
    names = {i.name for i in sess.get_inputs()}
    feeds = {"input_ids": np.full((len(states), 1), start, np.int64), "encoder_hidden_states": states,
             "use_cache_branch": np.array([False]), **fva.empty_past(sess, len(states))}
    for mask in ("encoder_attention_mask", "attention_mask"):  # the samples' mask, as the torch decoder takes it
        if mask in names:
            feeds[mask] = enc_feeds["attention_mask"]
    return {k: v for k, v in feeds.items() if k in names}


def references(fx: Path, model, fe, clips) -> tuple[dict, dict]:
    es = fva.session(fx / "onnx/encoder_model.onnx")
    ef = _encoder_feeds(es, fe, clips)
    eo = fva.run(es, ef)
    ds = fva.session(fx / "onnx/decoder_model_merged.onnx")
    first = _decoder_first(ds, ef, eo["last_hidden_state"], model.config.decoder_start_token_id)
    steps = fva.decoder_steps(ds, first, 3)
    graphs = {"onnx/encoder_model.onnx": {"reference": fva.save_reference(fx, "onnx/encoder_model.onnx", [(ef, eo)])},
              "onnx/decoder_model_merged.onnx": {"reference": fva.save_reference(fx, "onnx/decoder_model_merged.onnx",
                                                                                  steps),
                                                 "static_inputs": ["use_cache_branch"]}}
    return graphs, _check_torch(model, ef, eo, steps)


def _check_torch(model, ef, eo, steps) -> dict:
    """The torch model on the reference inputs against onnxruntime (rap.ONNX_ATOL)."""
    from transformers.modeling_outputs import BaseModelOutput

    values, mask = torch.from_numpy(ef["input_values"]), torch.from_numpy(ef["attention_mask"])
    with torch.no_grad():
        t_enc = model.model.encoder(values, attention_mask=mask).last_hidden_state
    diffs = {"encoder last_hidden_state": rap.assert_close("moonshine encoder", t_enc, eo["last_hidden_state"])}
    ids = None
    for k, (feeds, outs) in enumerate(steps):
        ids = feeds["input_ids"] if ids is None else np.concatenate([ids, feeds["input_ids"]], axis=1)
        with torch.no_grad():
            t = model(encoder_outputs=BaseModelOutput(last_hidden_state=torch.from_numpy(eo["last_hidden_state"])),
                      attention_mask=mask, decoder_input_ids=torch.from_numpy(ids)).logits[:, -outs["logits"].shape[1]:]
        diffs[f"decoder step {k} logits"] = rap.assert_close(f"moonshine decoder step {k}", t, outs["logits"])
    return diffs


# ---- pipeline cases --------------------------------------------------------------------------------


class GenerateSpy:
    """What model.generate returned inside each pipeline call (token ids, one entry per generate call)."""

    def __init__(self, model):
        self.model, self.calls = model, []
        generate = model.generate

        def spy(*args, **kwargs):
            out = generate(*args, **kwargs)
            self.calls[-1].append({"input_values_shape": list(kwargs["input_values"].shape),
                                   "token_ids": out.tolist()})
            return out

        model.generate = spy

    def close(self):
        del self.model.generate

    def new_call(self):
        self.calls.append([])

    def record(self) -> dict:
        calls, self.calls = self.calls, []
        return {"generate_calls": calls}


NOTES = [
    "transformers' AutomaticSpeechRecognitionPipeline type 'seq2seq' (MoonshineForConditionalGeneration is in "
    "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING): input_values and the feature extractor's attention_mask go to "
    "model.generate; the text is tokenizer.decode(tokens, skip_special_tokens=True)",
    "the pipeline's own generation defaults apply (num_beams=5, max_new_tokens 256: generation_config.json sets "
    "neither); greedy cases pass num_beams=1 and max_new_tokens=10 (case beams_default keeps num_beams=5)",
    "batches: the pipeline pads input_values with zeros and the attention mask with 0; the model downsamples the "
    "mask by 384 samples (mask[::384][:frames]), so a shorter clip's batch row sees ceil(n/384) encoder frames "
    "where the clip alone gives ((((n-127)//64+1-7)//3+1-3)//2+1): equals_case says whether the batch equals "
    "the clips one by one",
    "chunk_length_s (seq2seq, not Whisper): windows with strides as for CTC, but the stride does not reach "
    "postprocess: the windows' token ids are concatenated and decoded as one sequence",
    "an input's own 'stride' and return_timestamps are errors for seq2seq models other than Whisper",
    "generate_calls: per pipeline call, per generate call, the input_values shape and the returned ids (the "
    "decoder start token <s> first)",
]


def cases(p, model) -> list[dict]:
    spy = GenerateSpy(model)
    run = lambda *a, **k: rap.run_case(p, *a, hooks=spy, **k)  # noqa: E731
    short, whole = [rap.CAT_1S, rap.FOX_1S], [rap.CAT, rap.FOX]
    g = {"generate_kwargs": GREEDY}
    out = [run("sine", rap.sine(NAME), g), run("greedy_1s", short, g), run("greedy_whole", whole, g)]
    out += [rap.compare(out, run("batch_greedy_1s", short, g, batch_size=2), "greedy_1s"),
            rap.compare(out, run("batch_greedy_whole", whole, g, batch_size=2), "greedy_whole"),
            run("beams_default", short, {"generate_kwargs": {"max_new_tokens": 10}}),
            run("greedy_max_new_tokens_5", whole, {"generate_kwargs": {**GREEDY, "max_new_tokens": 5}}),
            run("chunked", [rap.LONG_10S], {"chunk_length_s": 2.0, "ignore_warning": True, **g})]
    out += [rap.compare(out, run("batch_chunked", [rap.LONG_10S], {"chunk_length_s": 2.0, "ignore_warning": True,
                                                                    **g}, batch_size=4), "chunked"),
            run("timestamps_is_an_error", [rap.CAT_1S], {"return_timestamps": True, **g}),
            run("input_stride_is_an_error", [rap.CAT], g, input_extra={"stride": [1600, 1600]})]
    spy.close()
    return out


def build_moonshine():
    fx = fva.fresh_fixture(NAME)
    tmp = fva.tmpdir()
    tok, fe = moonshine_tokenizer(tmp), feature_extractor()
    model = build_model(tok)
    d = fva.save_model_dir(model, tmp, fe, tok)
    out = fva.export_main(d, tmp / "out", "automatic-speech-recognition-with-past", 18)
    fva.move_onnx(out, fx, {"encoder_model.onnx": "encoder_model.onnx",
                            "decoder_model_merged.onnx": "decoder_model_merged.onnx"})
    fva.copy_hub_files(d, fx)
    clips = fva.write_audio(fx)
    graphs, check = references(fx, model, fe, clips)
    p = rap.pipeline_for(NAME, TASK, model)
    rap.write_record(NAME, TASK, cases(p, model), notes=NOTES, torch_vs_onnx_max_abs_diff=check)
    fva.write_manifest(
        fx, family="moonshine", architecture="MoonshineForConditionalGeneration", task=f"{TASK}-with-past",
        opset=18, graphs=graphs,
        notes=["MoonshineConfig hidden 32, intermediate 64, 2 encoder + 2 decoder layers, 2 heads (head_dim 16, "
               "partial_rotary_factor 0.9), vocab of the tokenizer; weights perturbed (std 0.2), the tied embedding "
               "rows of <unk>/<s>/</s> and the 256 byte-fallback tokens scaled by 0.25 (readable greedy texts)",
               "tokenizer: sentencepiece BPE (400 pieces, byte_fallback) as LlamaTokenizerFast (legacy), pad token "
               "</s> (the eos; transformers' pipeline batches only with a pad token)",
               "encoder_model.onnx: input_values [batch, samples] (raw 16 kHz) + attention_mask -> last_hidden_state "
               "[batch, ((((samples-127)//64+1-7)//3+1-3)//2+1), 32]",
               "decoder_model_merged.onnx: If on use_cache_branch; prompt step uses zero-length past (dim 2 = 0); "
               "references start from decoder_start_token_id <s> and decode greedily",
               "references: the two sine clips (1 s, 0.75 s) padded together, attention_mask with zeros",
               f"torch vs onnxruntime on the reference inputs: {check}"],
        inputs_from="references/audio_*.npy through preprocessor_config.json (Wav2Vec2FeatureExtractor)")
    shutil.rmtree(tmp)
    return fx


BUILDERS = {NAME: build_moonshine}


if __name__ == "__main__":
    sys.exit(fva.main(sys.argv[1:], BUILDERS))
