"""The encoder-decoder generator a pipeline runs (text2text, Whisper, Moonshine): one per decoder
model, shared by the pipelines over it (each step shape compiles once) through shared.py, and
dying with the model."""

from ..generation.seq2seq import Seq2SeqGenerator
from ..errors import PipelineError
from ..hub.load import load_beside
from . import shared


def generator(model, config, repo=None, encoder=None, encoder_variant=None):
    """``model``'s Seq2SeqGenerator, made on first use with ``encoder`` (a transmuter.Model) or
    the repo's encoder_model. A decoder without past inputs (a split export's decoder_model)
    runs the first step; the repo's decoder_with_past_model, loaded beside it, the others."""
    def make():
        first = encoder or load_encoder(repo, model, encoder_variant)
        if has_past(model):
            return Seq2SeqGenerator(first, model, config)
        with_past = load_with_past(repo, model, encoder_variant)
        return Seq2SeqGenerator(first, with_past, config, first_decoder=model)

    return shared.per_model(model, "seq2seq", make, renew=encoder is not None)


def has_past(model):
    return any(v.name.startswith(("past_key_values.", "past_")) for v in model.inputs)


def load_with_past(repo, decoder, variant):
    """A split pair's decoder_with_past_model, in ``decoder``'s precision as load_encoder picks
    it."""
    files = repo.onnx_files() if repo is not None else []
    if not any(f.rsplit("/", 1)[-1].startswith("decoder_with_past_model") for f in files):
        raise PipelineError("This decoder takes no past_key_values (a split export's "
                            "decoder_model.onnx): generation needs its decoder_with_past_model"
                            ".onnx beside it, or the merged decoder_model_merged.onnx"
                            + ("" if repo is not None else "; give config= the repo folder"))
    return load_beside(decoder, repo, repo.choose("decoder_with_past_model",
                                                  _variant(decoder, variant)).path)


def load_encoder(repo, decoder, variant):
    """The repo's encoder_model: the decoder's half precision when its encoder input is half,
    else ``variant`` or the repo's default (config.json / fp32 first)."""
    if repo is None:
        raise PipelineError("An encoder-decoder model loaded by hand needs encoder= (the "
                            "encoder's transmuter.Model) or config= its repo folder")
    file = repo.choose("encoder_model", _variant(decoder, variant)).path
    return load_beside(decoder, repo, file)


def _variant(decoder, variant):
    """``variant``, else fp16 for a decoder whose encoder input is half (else None: the repo's
    default)."""
    states = next((v for v in decoder.inputs if v.name == "encoder_hidden_states"), None)
    if variant is None and states is not None and str(states.dtype) == "float16":
        return "fp16"
    return variant
