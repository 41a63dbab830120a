"""``pipeline(task, model, **options)``: resolve the repo, load the graph and the tokenizer."""

from . import registry
from .base import PipelineError


def pipeline(task, model=None, *, tokenizer=None, config=None, backend="jax", compute_type=None,
             variant=None, revision=None, cache_dir=None, local_files_only=False, token=None,
             **options):
    """A ``Pipeline`` for ``task`` (transformers' names and aliases, plus ``text-embedding``,
    ``text-ranking``).

    ``model`` is a Hub id ("org/name"), a local folder laid out like one, or a ``transmuter.Model``
    loaded by hand (then give ``tokenizer=`` and ``config=``, or a repo as ``config=``).
    ``tokenizer`` may be a ``transmuter`` Tokenizer, a ``tokenizers.Tokenizer``, or a repo/folder.
    ``variant`` picks the ONNX file ("fp32", "fp16", "q8", "q4", ...); ``revision``, ``cache_dir``,
    ``local_files_only`` and ``token`` reach the Hub; ``backend`` ("jax", "mlx") and
    ``compute_type`` reach ``transmuter.load``. Other options (``batch_size``,
    ``sequence_length``, ``progress`` and the task's own, e.g. ``top_k``) go to the pipeline.
    """
    from .. import hub
    from ..model import Model, load

    cls = registry.get(task)
    if model is None:
        raise PipelineError(f"pipeline({task!r}) needs a model: a Hub id like 'org/name', a local "
                            "folder, or a transmuter.Model (Transmuter has no default models)")
    where = dict(revision=revision, cache_dir=cache_dir, local_files_only=local_files_only,
                 token=token)
    repo = None
    if isinstance(model, Model):
        if isinstance(config, (str, hub.Repo)) or hasattr(config, "__fspath__"):
            repo = hub.resolve(config, **where)
    else:
        repo = hub.resolve(model, **where)
        # a task may read another graph than onnx/model*.onnx (decoder_model_merged, ...)
        component = cls.onnx_component(repo) if hasattr(cls, "onnx_component") else None
        file = repo.choose(component, variant).path if component else None
        model = load(repo, file, backend=backend, compute_type=compute_type, variant=variant)
    if repo is not None and not isinstance(config, dict):
        config = repo.config()
    if config is None:
        raise PipelineError("A model given as a transmuter.Model needs config= (config.json as a "
                            "dict, or the repo/folder it came from)")
    tokenizer = _tokenizer(tokenizer, repo, where)
    if getattr(cls, "encoder_component", None) and variant is not None:
        options.setdefault("encoder_variant", variant)  # the encoder takes the decoder's variant
    return cls(model, tokenizer, config, repo=repo, **options)


def _tokenizer(tokenizer, repo, where):
    from .. import hub
    from ..preprocess.tokenizer import Tokenizer

    if isinstance(tokenizer, Tokenizer):
        return tokenizer
    if tokenizer is None:
        if repo is None:
            raise PipelineError("Give tokenizer= (a tokenizers.Tokenizer, a transmuter Tokenizer, "
                                "or a folder) with a model loaded by hand")
        return Tokenizer.from_repo(repo)
    if type(tokenizer).__module__.startswith("tokenizers"):
        # special tokens and limits still come from the repo's tokenizer_config.json
        return Tokenizer(tokenizer, repo.json("tokenizer_config.json", {}) if repo else {})
    return Tokenizer.from_repo(hub.resolve(tokenizer, **where))
