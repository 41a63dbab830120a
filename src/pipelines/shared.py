"""What the pipelines over one model share: its compiled function, a generator and its compiled
steps, SpeechT5's other graphs. Pipelines over one model (text2text and summarization over one
decoder, a vision encoder's compiled function) find what the first made, so each shape compiles
once; it dies with the model.

    fn = shared.per_model(model, "compiled", lambda: compile(model))

The entries hang on the model itself, in one dict that only this module names: a module-level
table (a ``weakref.WeakKeyDictionary`` keyed by the model) would keep every model alive, since
its values (a compiled function, a generator) hold their model, and Python has no ephemerons
that would free a key its own value refers to. A model and its entries are one cycle that the
garbage collector frees when nothing else holds them (tests/test_pipeline_layer.py)."""

# what may be shared, and by whom
KEYS = {
    "compiled": "the model's compiled function (Pipeline._run_model, a vision encoder's)",
    "seq2seq": "encoder_decoder.generator's Seq2SeqGenerator (text2text, Whisper, Moonshine, "
               "image-to-text)",
    "florence2": "Florence-2's Seq2SeqGenerator (vision/florence2/pipeline.py)",
    "vlm": "image-text-to-text's EmbedsGenerator (vision/image_text_to_text.py)",
    "speecht5": "SpeechT5's three graphs (audio/tts/speecht5.py: SpeechT5Speech)",
}
_ATTRIBUTE = "_transmuter_pipelines_shared"


def of(model):
    """The dict of what pipelines over ``model`` share (made empty on first use)."""
    return vars(model).setdefault(_ATTRIBUTE, {})


def per_model(model, key, make, *, renew=False):
    """``model``'s entry ``key`` (one of KEYS), made by ``make()`` on first use, or now when
    ``renew`` (a pipeline given its own encoder replaces the generator for those after it)."""
    if key not in KEYS:
        raise KeyError(f"{key!r} is none of the shared entries {sorted(KEYS)}")
    entries = of(model)
    value = entries.get(key)
    if value is None or renew:
        value = entries[key] = make()
    return value
