"""The encoder-decoder generator a pipeline runs (text2text, Whisper, Moonshine): one per decoder
model, shared by the pipelines over it (each step shape compiles once); it lives on the model
(``model.shared``) and dies with it."""

from ..generation.seq2seq import Seq2SeqGenerator
from .base import PipelineError


def generator(model, config, repo=None, encoder=None, encoder_variant=None):
    """``model``'s Seq2SeqGenerator, made on first use with ``encoder`` (a transmuter.Model) or
    the repo's encoder_model."""
    gen = model.shared.get("seq2seq")
    if gen is None or encoder is not None:
        encoder = encoder or load_encoder(repo, model, encoder_variant)
        gen = model.shared["seq2seq"] = Seq2SeqGenerator(encoder, model, config)
    return gen


def load_encoder(repo, decoder, variant):
    """The repo's encoder_model: the decoder's half precision when its encoder input is half,
    else ``variant`` or the repo's default (config.json / fp32 first)."""
    from ..model import load_beside

    if repo is None:
        raise PipelineError("An encoder-decoder model loaded by hand needs encoder= (the "
                            "encoder's transmuter.Model) or config= its repo folder")
    states = next((v for v in decoder.inputs if v.name == "encoder_hidden_states"), None)
    if variant is None and states is not None and str(states.dtype) == "float16":
        variant = "fp16"
    file = repo.choose("encoder_model", variant).path
    return load_beside(decoder, repo, file)
