"""More tiny AUDIO fixtures: a wav2vec2 audio classifier and a HuBERT CTC model.

Same conventions as families_vision_audio.py (whose helpers this script imports): random-weight
models from transformers config classes, seeded and perturbed, exported offline with optimum-onnx
(onnx/model.onnx), onnxruntime references on the seeded sine clips (references/model.npz,
references/audio_*.npy), manifest.json; the transformers pipeline references are written by
record_audio_pipelines.py's case lists (the sine clips, then the committed speech), in its format.

  * wav2vec2-classifier  Wav2Vec2ForSequenceClassification, 4 labels, audio-classification
  * hubert-ctc           HubertForCTC with wav2vec2's character vocab, automatic-speech-recognition

Usage (regenerates deterministically; no argument = every fixture):

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/families_audio_more.py [names...]

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

import torch  # noqa: E402

import families_vision_audio as fva  # noqa: E402
import record_audio_pipelines as rap  # noqa: E402

KEYWORDS = ["yes", "no", "up", "down"]


def _tiny_wav2vec2_kwargs() -> dict:
    """The conv / transformer sizes of the wav2vec2 fixture (stride 20, 32 wide, 2 layers)."""
    return dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                conv_dim=(16, 16, 16), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                num_feat_extract_layers=3, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
                feat_extract_norm="group", do_stable_layer_norm=False)


def _feature_extractor():
    from transformers import Wav2Vec2FeatureExtractor

    return Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0,
                                    do_normalize=True, return_attention_mask=False)


def _record(task: str, cases_fn, onnx_check):
    """A pipeline_fn for _audio_fixture: torch vs the just-exported ONNX, then the cases."""

    def record(fx, model, fe, tok, clips):
        check = rap.check_single_onnx(fx, model, onnx_check)
        p = rap.pipeline_for(fx.name, task, model, tokenizer=tok is not None)
        rap.write_record(fx.name, task, cases_fn(fx.name, p, model), torch_vs_onnx_max_abs_diff=check,
                         notes=NOTES[task])

    return record


NOTES = {"audio-classification": rap.CLASSIFY_NOTES, "automatic-speech-recognition": rap.CTC_NOTES}


def build_wav2vec2_classifier():
    from transformers import Wav2Vec2Config, Wav2Vec2ForSequenceClassification

    cfg = Wav2Vec2Config(**_tiny_wav2vec2_kwargs(), classifier_proj_size=16, use_weighted_layer_sum=False,
                         id2label=fva._id2label(KEYWORDS), label2id={n: i for i, n in enumerate(KEYWORDS)},
                         architectures=["Wav2Vec2ForSequenceClassification"])
    fva.seed(0)
    # 0.2 rather than 0.05: mean-pooled random features otherwise give four near-equal scores
    model = fva.perturb(Wav2Vec2ForSequenceClassification(cfg).eval(), 0.2)
    record = _record("audio-classification",
                     lambda name, p, m: rap.classify_cases(name, p, m.config.num_labels), {"logits": "logits"})
    return fva._audio_fixture(
        "wav2vec2-classifier", "wav2vec2", "Wav2Vec2ForSequenceClassification", "audio-classification", model,
        _feature_extractor(), None, record,
        ["the wav2vec2 fixture's sizes (3 conv layers, stride 20, group norm, no attention_mask input), "
         "projector to 16, mean pooling over all frames, 4 keyword labels",
         "seeded weight noise std 0.2 (scores that differ between labels and clips)",
         "batch reference pads the 0.75 s clip with zeros (no attention mask: the pooling sees the padding)"])


def _ctc_tokenizer(tmp: Path):
    """wav2vec2's character vocab (its committed vocab.json) in a Wav2Vec2CTCTokenizer."""
    from transformers import Wav2Vec2CTCTokenizer

    vocab = tmp / "vocab.json"
    shutil.copy(fva.FIXTURES / "wav2vec2" / "vocab.json", vocab)
    return Wav2Vec2CTCTokenizer(str(vocab), unk_token="<unk>", pad_token="<pad>", bos_token="<s>",
                                eos_token="</s>", word_delimiter_token="|", do_lower_case=False)


def build_hubert_ctc():
    from transformers import HubertConfig, HubertForCTC

    tmp = fva.tmpdir()
    tok = _ctc_tokenizer(tmp)
    cfg = HubertConfig(vocab_size=len(tok), **_tiny_wav2vec2_kwargs(), pad_token_id=0, bos_token_id=1,
                       eos_token_id=2, architectures=["HubertForCTC"])
    fva.seed(0)
    model = fva.perturb(HubertForCTC(cfg).eval())
    with torch.no_grad():  # as for wav2vec2: let letters compete with <pad> in greedy CTC
        model.lm_head.bias[0] -= 0.5
    record = _record("automatic-speech-recognition", lambda name, p, m: rap.ctc_cases(name, p),
                     {"logits": "logits"})
    fx = fva._audio_fixture(
        "hubert-ctc", "hubert", "HubertForCTC", "automatic-speech-recognition", model, _feature_extractor(),
        tok, record,
        ["the wav2vec2 fixture's sizes (3 conv layers, stride 20, group norm, no attention_mask input) and "
         "its character vocab (tests/fixtures/wav2vec2/vocab.json)",
         "batch reference pads the 0.75 s clip with zeros"])
    shutil.rmtree(tmp)
    return fx


BUILDERS = {"wav2vec2-classifier": build_wav2vec2_classifier, "hubert-ctc": build_hubert_ctc}


if __name__ == "__main__":
    sys.exit(fva.main(sys.argv[1:], BUILDERS))
