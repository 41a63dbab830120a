"""``pipeline(task, model, **options)``: resolve the repo once, load the graph and what the task
declares it needs (``featurizers``: a tokenizer, an image processor)."""

from .. import hub
from ..engine.model import Model
from ..errors import PipelineError
from ..hub.load import load
from . import registry

# The featurizers' modules are imported when a pipeline first needs one, as the registry imports
# a task's module: importing transmuter loads no tokenizer, PIL or image processor family.


def pipeline(task, model=None, *, tokenizer=None, image_processor=None, feature_extractor=None,
             config=None,
             backend="jax", compute_type=None, variant=None, revision=None, cache_dir=None,
             local_files_only=False, token=None, checks=True, compile_cache=None, devices=None,
             trainable=False, **options):
    """A ``Pipeline`` for ``task`` (transformers' names and aliases, plus ``text-embedding``,
    ``text-ranking``).

    ``model`` is a Hub id ("org/name"), a local folder laid out like one, or a ``transmuter.Model``
    loaded by hand (then give ``config=`` and the task's featurizers, or a repo as ``config=``).
    ``tokenizer`` may be a ``transmuter`` Tokenizer, a ``tokenizers.Tokenizer``, or a repo/folder;
    ``image_processor`` a ``transmuter`` ImageProcessor, a preprocessor_config dict, or a
    repo/folder; ``feature_extractor`` (audio) a ``transmuter`` FeatureExtractor, a
    preprocessor_config dict, or a repo/folder. ``variant`` picks the ONNX file ("fp32", "fp16", "q8", "q4", ...);
    ``revision``, ``cache_dir``, ``local_files_only`` and ``token`` reach the Hub; ``backend``
    ("jax", "mlx"), ``compute_type`` and ``checks`` reach ``transmuter.load``: ``checks=True``
    refuses a tokenizer whose ids run past the model's embedding table (here, at load) and
    out-of-range ids at each call (``checks=False`` skips both; a model loaded by hand keeps its
    own ``load(checks=)``); ``trainable`` too (the weights ``transmuter.training`` trains);
    ``compile_cache`` too (a folder, or False: JAX's persistent
    compilation cache, docs/compile-cache.md); ``devices`` too (JAX: ``jax.devices()`` or a
    ``jax.sharding.Mesh``; each batch of ``batch_size`` rows is split over them, docs/scaling.md;
    a model loaded by hand takes its own ``load(devices=)``). Other options
    (``batch_size``, ``sequence_length``, ``progress`` and the task's own, e.g. ``top_k``) go to
    the pipeline. A task whose model families run apart (registry.FAMILIES) gets the class of the
    model's family, by config.json's ``model_type``.
    """
    cls = registry.get(task)
    if model is None:
        raise PipelineError(f"pipeline({task!r}) needs a model: a Hub id like 'org/name', a local "
                            "folder, or a transmuter.Model (Transmuter has no default models)")
    where = dict(revision=revision, cache_dir=cache_dir, local_files_only=local_files_only,
                 token=token)
    repo = None
    if isinstance(model, Model):
        if devices is not None:
            raise PipelineError("devices= applies when the pipeline loads the model; a "
                                "transmuter.Model takes them at load: "
                                "transmuter.load(..., devices=...)")
        if isinstance(config, (str, hub.Repo)) or hasattr(config, "__fspath__"):
            repo = hub.resolve(config, **where)
    else:
        repo = hub.resolve(model, **where)
        # a task may read another graph than onnx/model*.onnx (decoder_model_merged, ...), a
        # family its own (the repo's config.json says which)
        reads = registry.get(task, repo.config().get("model_type"))
        component = reads.onnx_component(repo) if hasattr(reads, "onnx_component") else "model"
        model = load(repo.onnx_file(component, variant), backend=backend,
                     compute_type=compute_type, checks=checks, compile_cache=compile_cache,
                     devices=devices, trainable=trainable)
    if repo is not None and not isinstance(config, dict):
        config = repo.config()
    if config is None:
        raise PipelineError("A model given as a transmuter.Model needs config= (config.json as a "
                            "dict, or the repo/folder it came from)")
    cls = registry.get(task, config.get("model_type") if isinstance(config, dict) else None)
    given = {"tokenizer": tokenizer, "image_processor": image_processor,
             "feature_extractor": feature_extractor}
    unused = [name for name, value in given.items()
              if value is not None and name not in cls.featurizers]
    if unused:
        raise PipelineError(f"{cls.task} takes no {' or '.join(unused)}")
    featurizers = {name: _FEATURIZERS[name](given[name], repo, where) for name in cls.featurizers}
    if model.checks and featurizers.get("tokenizer") is not None:
        _check_vocabulary(model, featurizers["tokenizer"])
    if getattr(cls, "encoder_component", None) and variant is not None:
        options.setdefault("encoder_variant", variant)  # the encoder takes the decoder's variant
    return cls(model, config, repo=repo, **featurizers, **options)


def _tokenizer(tokenizer, repo, where):
    from ..preprocess.text.auto import tokenizer_for
    from ..preprocess.text.tokenizer import Tokenizer

    if isinstance(tokenizer, Tokenizer):
        return tokenizer
    if tokenizer is None:
        if repo is None:
            raise PipelineError("Give tokenizer= (a tokenizers.Tokenizer, a transmuter Tokenizer, "
                                "or a folder) with a model loaded by hand")
        return tokenizer_for(repo)
    if type(tokenizer).__module__.startswith("tokenizers"):
        # special tokens and limits still come from the repo's tokenizer_config.json
        return Tokenizer(tokenizer, repo.json("tokenizer_config.json", {}) if repo else {})
    return tokenizer_for(hub.resolve(tokenizer, **where))


def _check_vocabulary(model, tokenizer):
    """A tokenizer that makes ids past the rows of the table ``input_ids`` picks from (added
    tokens the export's embeddings lack, another model's tokenizer) would give NaN or garbage on
    those ids: refused at load."""
    found = model.input_indices.table("input_ids")
    if found is None:
        return
    rows, use = found
    largest = _largest_id(tokenizer)
    if largest is None or largest < rows:
        return
    raise PipelineError(
        f"The tokenizer makes ids up to {largest}, but the model's embedding table "
        f"{use.data_name!r} ({use.node.label}) has {rows} rows: they do not match. Give the "
        "model's own tokenizer=, or checks=False if no text will produce the missing ids")


def _largest_id(tokenizer):
    """The largest id a tokenizer makes (its vocabulary and added tokens), or None."""
    backend = getattr(tokenizer, "backend", None)
    if hasattr(backend, "get_vocab_size") and hasattr(backend, "get_added_tokens_decoder"):
        return max([backend.get_vocab_size(with_added_tokens=True) - 1,
                    *backend.get_added_tokens_decoder()])
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else None
    return max(vocab.values()) if vocab else None


def _image_processor(processor, repo, where):
    from ..preprocess.image.auto import image_processor_for
    from ..preprocess.image.processor import ImageProcessor

    return _preprocessor(processor, repo, where, ImageProcessor, image_processor_for,
                         "image_processor", "images")


def _feature_extractor(extractor, repo, where):
    from ..preprocess.audio.features import FeatureExtractor

    return _preprocessor(extractor, repo, where, FeatureExtractor, FeatureExtractor.from_config,
                         "feature_extractor", "audio")


def _preprocessor(given, repo, where, cls, build, option, what):
    """An image processor or feature extractor: ``given`` as it is (a ``cls``), from a
    preprocessor_config.json dict, or from a repo/folder (the model's own by default); ``build``
    makes one from the dict."""
    if isinstance(given, cls):
        return given
    if isinstance(given, dict):
        return build(given)
    if given is not None:
        repo = hub.resolve(given, **where)
    if repo is None:
        raise PipelineError(f"Give {option}= (a preprocessor_config.json dict, a transmuter "
                            f"{cls.__name__}, or a folder) with a model loaded by hand")
    settings = repo.json("preprocessor_config.json")
    if settings is None:
        raise PipelineError(f"{repo.label} has no preprocessor_config.json, so its {what} cannot "
                            f"be prepared as the model expects; give {option}=")
    return build(settings)


_FEATURIZERS = {"tokenizer": _tokenizer, "image_processor": _image_processor,
                "feature_extractor": _feature_extractor}
