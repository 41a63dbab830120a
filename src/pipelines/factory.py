"""``pipeline(task, model, **options)``: resolve the repo once, load the graph and what the task
declares it needs (``featurizers``: a tokenizer, an image processor)."""

from .. import hub
from ..engine.model import Model
from ..errors import PipelineError
from ..hub.load import load
from . import peer_options, registry, task_inference

# The featurizers' modules are imported when a pipeline first needs one, as the registry imports
# a task's module: importing transmuter loads no tokenizer, PIL or image processor family.


def pipeline(task=None, model=None, **options):
    """A ``Pipeline`` for ``task`` (transformers' names and aliases, plus ``text-embedding``,
    ``text-ranking``).

    ``model`` is a Hub id ("org/name"), a local folder laid out like one, or a ``transmuter.Model``
    loaded by hand (then give ``config=`` and the task's featurizers, or a repo as ``config=``).
    Without ``model``, the task's default model of transformers.js (task_inference.py); without
    ``task``, the task the repo's pipeline_tag, else its config.json's architectures, names.
    ``tokenizer`` may be a ``transmuter`` Tokenizer, a ``tokenizers.Tokenizer``, or a repo/folder;
    ``image_processor`` a ``transmuter`` ImageProcessor, a preprocessor_config dict, or a
    repo/folder; ``feature_extractor`` (audio) a ``transmuter`` FeatureExtractor, a
    preprocessor_config dict, or a repo/folder. ``variant`` picks the ONNX file ("fp32", "fp16",
    "q8", "q4", ..., "auto", or a dict of them per component); ``model_file_name`` (the graph's
    name without its suffix, default the task's) and ``subfolder`` (default "onnx") pick another
    graph of encoder-only or decoder-only models, as transformers.js does;
    ``revision``, ``cache_dir``, ``local_files_only`` and ``token`` reach the Hub; ``backend``
    ("jax", "mlx"), ``compute_type`` and ``checks`` reach ``transmuter.load``: ``checks=True``
    refuses a tokenizer whose ids run past the model's embedding table (here, at load) and
    out-of-range ids at each call (``checks=False`` skips both; a model loaded by hand keeps its
    own ``load(checks=)``); ``trainable`` too (the weights ``transmuter.training`` trains);
    ``compile_cache`` too (a folder, or False: JAX's persistent
    compilation cache, docs/compile-cache.md); ``compile_ahead`` too (False: the next shapes
    are not compiled in the background); ``devices`` too (JAX: ``jax.devices()`` or a
    ``jax.sharding.Mesh``; each batch of ``batch_size`` rows is split over them, docs/scaling.md;
    a model loaded by hand takes its own ``load(devices=)``). The peers' names are accepted
    aliases (peer_options.py): ``dtype`` for ``variant`` (transformers.js), ``device`` for
    ``devices``/``backend`` ("cpu", "gpu"/"cuda", "cuda:1", an int, a jax.Device; "mps": MLX),
    ``model_kwargs`` (a dict of the loading options above). Other options
    (``batch_size``, ``sequence_length``, ``progress`` and the task's own, e.g. ``top_k``) go to
    the pipeline. A task whose model families run apart (registry.FAMILIES) gets the class of the
    model's family, by config.json's ``model_type``.
    """
    options = peer_options.translate(options)
    if model is None:
        if task is None:
            raise PipelineError("pipeline() needs a task, a model, or both")
        model, dtype = task_inference.default_model(task)
        if options.get("variant") is None:
            options["variant"] = dtype
    if task is None:
        if isinstance(model, Model):
            raise PipelineError("A model loaded by hand says no task: give pipeline(task, model)")
        where = {k: options.get(k) for k in ("revision", "cache_dir", "token")}
        model = hub.resolve(model, local_files_only=options.get("local_files_only", False),
                            **where)  # resolved once: _pipeline takes the Repo as it is
        task = task_inference.infer_task(model)
    return _pipeline(task, model, **options)


def _pipeline(task, model, *, tokenizer=None, image_processor=None, feature_extractor=None,
              config=None, backend="jax", compute_type=None, variant=None, revision=None,
              cache_dir=None, local_files_only=False, token=None, checks=True, compile_cache=None,
              compile_ahead=None,
              devices=None, trainable=False, subfolder="onnx", model_file_name=None, **options):
    cls = registry.get(task)
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
        repo.prefetch_settings()  # in one download, before the featurizers read them one by one
        # a task may read another graph than onnx/model*.onnx (decoder_model_merged, ...), a
        # family its own (the repo's config.json says which)
        reads = registry.get(task, registry.model_type(task, repo))
        component = reads.onnx_component(repo) if hasattr(reads, "onnx_component") else "model"
        if model_file_name is not None or subfolder != "onnx":
            component = _one_graph(reads, model_file_name or component)
        # a diffusers export keeps each graph in its own folder (unet/model.onnx, ...)
        folder = getattr(reads, "onnx_subfolder", subfolder)
        model = load(repo.onnx_file(component, variant, subfolder=folder), backend=backend,
                     compute_type=compute_type, checks=checks, compile_cache=compile_cache,
                     compile_ahead=compile_ahead,
                     devices=devices, trainable=trainable)
    if repo is not None and not isinstance(config, dict):
        config = repo.config()
        kind = registry.model_type(task, repo)  # a folder without one may show its family
        if kind != config.get("model_type"):
            config = {**config, "model_type": kind}
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


def _one_graph(cls, component):
    """``component``, where ``cls`` runs one graph: transformers.js takes model_file_name= and
    subfolder= for encoder-only and decoder-only models; a task that loads other graphs beside
    the first (an encoder, a text half, a vocoder) finds them by their own names."""
    several = getattr(cls, "encoder_component", None) or (
        hasattr(cls, "onnx_component") and cls.task != "text-generation")
    if several:
        raise PipelineError(f"model_file_name= and subfolder= pick the one graph of an encoder-"
                            f"only or decoder-only model; {cls.task} loads several graphs by their "
                            "names (variant= still picks their precision)")
    return component


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
        # transformers 5's processors save one processor_config.json, the image processor /
        # feature extractor nested under its attribute name (ProcessorMixin.to_dict)
        settings = (repo.json("processor_config.json") or {}).get(option)
    if settings is None:
        raise PipelineError(f"{repo.label} has no preprocessor_config.json (nor a "
                            f"processor_config.json holding an {option!r}), so its {what} cannot "
                            f"be prepared as the model expects; give {option}=")
    return build(settings)


_FEATURIZERS = {"tokenizer": _tokenizer, "image_processor": _image_processor,
                "feature_extractor": _feature_extractor}
