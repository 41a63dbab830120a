"""Fine-tuning with optax: the batches and the loss a pipeline implies, and a compiled step.

    pipe = transmuter.pipeline("text-classification", folder, trainable=True)
    data = training.batches(pipe, texts, labels, batch_size=16, shuffle=True)
    step = training.step(pipe, optax.adamw(2e-5))          # the loss the task implies
    params = pipe.model.trainable_params
    state = step.init(params)
    for epoch in range(3):
        for batch in data:                                   # reshuffled each epoch
            params, state, loss = step(params, state, batch)
    transmuter.save_pretrained(pipe.model, "tuned/", params=params)

Low-rank adapters instead (the model's weights stay; A and B train; saving merges them):

    adapters = training.lora(pipe, rank=8, alpha=16)
    step = training.step(pipe, optax.adamw(1e-4), lora=adapters)
    params = adapters.init(seed=0)
    ...
    transmuter.save_pretrained(pipe.model, "tuned/", params=adapters.merge(params))

A text-embedding model with sentence-transformers Dense modules after pooling trains them too
when the params are ``training.params(pipe)`` (``pipe.model.trainable_params`` keeps them frozen);
``save_pretrained`` writes them back into their module folders.

Examples go through the pipeline's own ``preprocess`` (the tokenization, truncation and image
preparation of inference), so what trains is what will run. A batch always has ``batch_size``
rows (the last one is padded with rows of weight 0): one compiled shape per length bucket.

Token classification trains on pre-split words with a label per word (the CoNLL / datasets
layout): ``training.batches(pipe, [["My", "name", "is", "Clara"]], [["O", "O", "O", "B-PER"]])``.
Each word's label goes to its first sub-token; its other sub-tokens and the special tokens are
ignored (label -100), as transformers' token-classification recipe aligns them.

Losses (``loss=``, default by task, as the peers train these heads):
- ``"cross-entropy"``: text/image/audio classification (transformers' ``*ForSequenceClassification``
  with integer labels), text-ranking heads of more than one logit, and token classification
  (``*ForTokenClassification``: the mean over the labelled tokens);
- ``"mse"``: classification heads of one logit (transformers' regression ``problem_type``);
- ``"binary-cross-entropy"``: text-ranking heads of one logit (sentence-transformers'
  ``CrossEncoder`` default) and ``problem_type: multi_label_classification`` (labels are 0/1 rows);
- ``"multiple-negatives-ranking"``: text-embedding on (anchor, positive[, negatives...]) tuples,
  in-batch negatives, cosine scores scaled by 20 (sentence-transformers' default and loss);
- ``"cosine-similarity"``: text-embedding on (text, text) pairs with a float label: the MSE of
  their cosine similarity and the label (sentence-transformers' ``CosineSimilarityLoss``).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import InputError
from . import losses as training_losses
from .losses import IGNORE
from .lora import adapters as lora_adapters

LOSSES = ("cross-entropy", "mse", "binary-cross-entropy", "multiple-negatives-ranking",
          "cosine-similarity")
_EMBEDDING_LOSSES = ("multiple-negatives-ranking", "cosine-similarity")


class _Examples(NamedTuple):
    """What a task's examples are, where they are not what its pipeline takes with one label
    each: ``apart``, tuples of texts embedded apart (the embedding losses); ``words``, pre-split
    words with a label per word (labels per token); ``pair``, a (query, document) pair scored
    as one document. ``one_logit``: the default loss of a head of one logit."""

    apart: bool = False
    words: bool = False
    pair: bool = False
    one_logit: str = "mse"


# By pipeline task; other tasks take their pipeline's inputs, one label each.
_TASKS = {
    "text-embedding": _Examples(apart=True),
    "token-classification": _Examples(words=True),
    "text-ranking": _Examples(pair=True, one_logit="binary-cross-entropy"),
}


class Batch(NamedTuple):
    """``inputs``: one feed dict per column of the examples (one for classification, two or more
    for embedding tuples); ``labels`` per row; ``weights`` 1 for real rows and 0 for the padding
    rows of a last, short batch. A named tuple: a pytree that jit takes."""

    inputs: tuple
    labels: np.ndarray  # [rows], [rows, labels] or, for token classification, [rows, length]
    weights: np.ndarray


class Batches:
    """The examples of ``batches()``, prepared once; each iteration pads them into Batches (in a
    new order per epoch when ``shuffle``)."""

    def __init__(self, pipe, columns, labels, batch_size, shuffle, seed):
        self.pipe, self.columns, self.labels = pipe, columns, labels
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, seed
        self.epoch = 0

    def __len__(self):
        return -(-len(self.labels) // self.batch_size)

    def __iter__(self):
        order = np.arange(len(self.labels))
        if self.shuffle:
            np.random.default_rng([self.seed, self.epoch]).shuffle(order)
        self.epoch += 1
        for start in range(0, len(order), self.batch_size):
            yield self._batch(order[start:start + self.batch_size])

    def _batch(self, rows):
        pipe, n = self.pipe, self.batch_size
        inputs = []
        for column in self.columns:
            items = [column[i] for i in rows]
            inputs.append(pipe.batch_feed(items, n))
        weights = np.zeros(n, np.float32)
        weights[:len(rows)] = 1
        return Batch(tuple(inputs), self._labels(rows, inputs[0]["input_ids"].shape[1]), weights)

    def _labels(self, rows, length):
        n = self.batch_size
        if isinstance(self.labels, list):  # per token: padded to the batch's length, ignored
            labels = np.full((n, length), IGNORE, np.int32)
            for row, i in enumerate(rows):
                labels[row, :len(self.labels[i])] = self.labels[i]
            return labels
        labels = self.labels[rows]
        if len(rows) < n:  # spare rows repeat the first label: finite, and weighted out
            labels = np.concatenate([labels, np.repeat(labels[:1], n - len(rows), axis=0)])
        return labels


def batches(pipe, examples, labels=None, *, batch_size=16, shuffle=False, seed=0):
    """``examples`` (what the pipeline takes: texts, (text, text_pair) tuples, images, ...; for
    text-embedding, tuples of texts to embed apart) with their ``labels`` (class names of the
    model's id2label or ints, floats for regression and cosine-similarity; none for
    multiple-negatives-ranking; for token classification, lists of words with a list of word
    labels each) as re-iterable padded ``Batch``es."""
    _check_pipeline(pipe)
    examples = list(examples)
    if not examples:
        raise InputError("training.batches got no examples")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InputError(f"batch_size must be a positive int, got {batch_size!r}")
    pairs = _embeds_apart(pipe)
    columns = _columns(pipe, examples, pairs)
    if labels is None and not (pairs and len(columns) >= 2):
        raise InputError(f"training.batches: a {pipe.task} pipeline trains on labelled "
                         "examples; give labels= (one per example)")
    if _per_token(pipe):
        labels = _token_labels(pipe, examples, columns[0], labels)
    else:
        labels = np.zeros(len(examples), np.float32) if labels is None else \
            _labels(pipe, list(labels), len(examples))
    return Batches(pipe, columns, labels, batch_size, shuffle, seed)


def loss(pipe, kind=None):
    """``loss(params, batch) -> scalar``: the mean over the batch's real rows of the loss
    ``kind`` (one of LOSSES; default: the task's, see the module docstring)."""
    _check_pipeline(pipe)
    kind = _default_loss(pipe) if kind is None else kind
    if kind not in LOSSES:
        raise InputError(f"Unknown loss {kind!r}; use one of {', '.join(LOSSES)}")
    if (kind in _EMBEDDING_LOSSES) != _embeds_apart(pipe):
        raise InputError(f"loss {kind!r} does not fit a {pipe.task} pipeline: "
                         f"{', '.join(_EMBEDDING_LOSSES)} train text-embedding pipelines, the "
                         "others classification and ranking heads")
    if _per_token(pipe) and kind != "cross-entropy":
        raise InputError(f"loss {kind!r} does not fit a token-classification pipeline: it "
                         "trains with cross-entropy over the labelled tokens")
    return getattr(training_losses, kind.replace("-", "_"))(pipe)


_task_loss = loss  # step() takes a ``loss=`` option, which hides the function there


class Step:
    """A compiled optimizer step: ``params, state, loss = step(params, state, batch)``."""

    def __init__(self, model, loss_fn, optimizer):
        import optax

        self.model, self.optimizer = model, optimizer

        def run(params, state, batch):
            value, grads = jax.value_and_grad(loss_fn)(params, batch)
            updates, state = optimizer.update(grads, state, params)
            return optax.apply_updates(params, updates), state, value

        # The backend's compiler options, as inference has them: XLA's YNNPACK fusions slowed the
        # step too (all-MiniLM-L6-v2, MNRL, 16 x 64 tokens, 2 cores: 770 -> 679 ms best of 8).
        self._run = model.backend.compile(run)

    def init(self, params):
        return self.optimizer.init(params)

    def __call__(self, params, state, batch):
        if self.model.checks:  # on the host: inside the step the ids are traced
            for feed in batch.inputs:
                self.model.check_indices(feed)
        return self._run(params, state, batch)


def params(pipe):
    """The pytree to train: the model's trainable weights (``pipe.model.trainable_params``) and,
    in a text-embedding pipeline whose modules.json has Dense modules after pooling, their
    weights by ``"<module folder>/linear.weight"`` (and ``".../linear.bias"``), which train too
    and which ``save_pretrained`` writes back into the module's folder. Pass
    ``pipe.model.trainable_params`` instead to keep the Dense modules as they are."""
    _check_pipeline(pipe)
    out = dict(pipe.model.trainable_params)
    for module in getattr(pipe, "head", ()):
        if hasattr(module, "tensors"):
            out.update({module.param_name(t): jnp.asarray(v) for t, v in module.tensors().items()})
    return out


def lora(pipe, *, rank=8, alpha=None, targets=None):
    """Low-rank adapters (training/lora.py) on the MatMul / Gemm weights of ``pipe``'s model:
    pass them as ``step(..., lora=adapters)``, train ``adapters.init()``, save
    ``adapters.merge(params)``. ``targets``: names or a predicate (default: every such weight)."""
    _check_pipeline(pipe)
    return lora_adapters(pipe.model, rank=rank, alpha=alpha, targets=targets)


def step(pipe, optimizer, *, loss=None, accumulate=1, lora=None):
    """A ``Step`` that trains ``pipe``'s model with an optax ``optimizer`` on ``loss`` (a kind of
    LOSSES, or a function ``(params, batch) -> scalar``; default: the task's).
    ``accumulate=k`` sums the gradients of k batches per update (``optax.MultiSteps``).
    ``lora``: adapters from ``training.lora(pipe)``; the step then trains their params
    (``adapters.init()``) and the model's weights stay as loaded."""
    optax = _optax()
    loss_fn = loss if callable(loss) else _task_loss(pipe, loss)
    if lora is not None:
        base = loss_fn

        def loss_fn(params, batch):
            return base(lora.merge(params), batch)
    elif not pipe.model.trainable:
        raise InputError("This pipeline's model has no trainable weights: create it with "
                         "transmuter.pipeline(task, model, trainable=True) (or a list of "
                         "initializer names), or train adapters: step(..., "
                         "lora=training.lora(pipe))")
    if isinstance(accumulate, bool) or not isinstance(accumulate, int) or accumulate < 1:
        raise InputError(f"accumulate must be a positive int, got {accumulate!r}")
    if accumulate > 1:
        optimizer = optax.MultiSteps(optimizer, every_k_schedule=accumulate)
    return Step(pipe.model, loss_fn, optimizer)


# --- helpers ----------------------------------------------------------------------------------

def _optax():
    try:
        import optax
    except ImportError:
        raise InputError("transmuter.training steps use optax: pip install optax") from None
    return optax


def _check_pipeline(pipe):
    model = getattr(pipe, "model", None)
    if model is None or getattr(pipe, "featurizer", None) is None:
        raise InputError(f"training needs a transmuter pipeline, got {type(pipe).__name__}")
    if getattr(pipe, "generates", False) or getattr(pipe, "scorer", None) is not None:
        raise InputError(f"training does not support {pipe.task} pipelines over generating "
                         "models (causal-LM rerankers, text generation) yet")
    if model.backend.name != "jax":
        raise InputError(f"training runs on the JAX backend (optax); this pipeline's model "
                         f"runs on {model.backend.name}: load it with backend='jax'")


def _task(pipe):
    return _TASKS.get(pipe.task, _Examples())


def _embeds_apart(pipe):
    return _task(pipe).apart


def _columns(pipe, examples, pairs):
    """Per column (one, or the texts of embedding tuples), the featurizer item of each example."""
    if pairs:
        widths = {len(e) if isinstance(e, (tuple, list)) else 1 for e in examples}
        if len(widths) != 1:
            raise InputError("text-embedding training examples must all be tuples of the same "
                             f"length (anchor, positive[, negative...]); got lengths {widths}")
        width = widths.pop()
        rows = [e if isinstance(e, (tuple, list)) else (e,) for e in examples]
        return [[_item(pipe, row[c], i) for i, row in enumerate(rows)] for c in range(width)]
    return [[_item(pipe, e, i) for i, e in enumerate(examples)]]


def _per_token(pipe):
    return _task(pipe).words


def _item(pipe, example, index):
    if _per_token(pipe):
        return _words(pipe, example, index)
    if _task(pipe).pair:  # a (query, document) pair: one document to score
        if not (isinstance(example, (tuple, list)) and len(example) == 2):
            raise InputError(f"training example {index}: text-ranking trains on (query, "
                             f"document) pairs, got {example!r:.80}")
        example = {"query": example[0], "documents": [example[1]]}
    try:
        chunks = list(pipe.preprocess(example))
    except Exception as e:  # noqa: BLE001 - name the example, keep the pipeline's message
        raise InputError(f"training example {index}: {e}") from None
    if len(chunks) != 1:
        raise InputError(f"training example {index} makes {len(chunks)} chunks in {pipe.task}; "
                         "training takes examples the pipeline runs in one piece")
    return chunks[0][pipe.featurizer.key]


def _words(pipe, example, index):
    """One example's encoding, its words tokenized apart (``word_ids`` align the labels)."""
    if not (isinstance(example, (list, tuple)) and example
            and all(isinstance(w, str) for w in example)):
        raise InputError(f"training example {index}: token-classification trains on pre-split "
                         "words with a label per word, e.g. ['My', 'name', 'is', 'Clara'] with "
                         f"labels ['O', 'O', 'O', 'B-PER']; got {example!r:.80}")
    try:
        return pipe.tokenizer.encode_words(example, max_length=pipe.sequence_lengths[-1])
    except Exception as e:  # noqa: BLE001 - name the example, keep the tokenizer's message
        raise InputError(f"training example {index}: {e}") from None


def _token_labels(pipe, examples, encodings, labels):
    """Per example, its token labels: each word's on its first sub-token, IGNORE elsewhere."""
    if labels is None or len(labels := list(labels)) != len(examples):
        raise InputError(f"training.batches got {len(examples)} examples and "
                         f"{0 if labels is None else len(labels)} label lists; token "
                         "classification takes one list of word labels per example")
    out = []
    for index, (words, encoding, tags) in enumerate(zip(examples, encodings, labels)):
        if isinstance(tags, str) or len(tags := list(tags)) != len(words):
            raise InputError(f"training example {index} has {len(words)} words and "
                             f"{1 if isinstance(tags, str) else len(tags)} labels; give one "
                             "label per word")
        ids = _labels(pipe, tags, len(tags))
        previous, row = None, []
        for word in encoding.word_ids:
            row.append(IGNORE if word is None or word == previous else ids[word])
            previous = word
        out.append(np.array(row, np.int32))
    return out


def _labels(pipe, labels, n):
    if len(labels) != n:
        raise InputError(f"training.batches got {n} examples and {len(labels)} labels")
    if _default_loss(pipe) in ("cross-entropy",) and all(isinstance(v, str) for v in labels):
        ids = _label2id(pipe)
        unknown = sorted({v for v in labels if v not in ids})
        if unknown:
            raise InputError(f"Labels {unknown} are not the model's (id2label: "
                             f"{', '.join(ids)})")
        return np.array([ids[v] for v in labels], np.int32)
    values = np.asarray(labels)
    if values.dtype.kind not in "biuf":
        raise InputError(f"labels must be numbers or class names, got {values.dtype}")
    if _default_loss(pipe) == "cross-entropy" and values.dtype.kind in "iub":
        classes = len(pipe.config.get("id2label") or {})
        if classes and (values.min() < 0 or values.max() >= classes):
            raise InputError(f"labels run from {values.min()} to {values.max()}, but the model "
                             f"has {classes} classes (0..{classes - 1})")
        return values.astype(np.int32)
    return values.astype(np.float32)


def _label2id(pipe):
    id2label = pipe.config.get("id2label") or {}
    return {name: int(i) for i, name in id2label.items()}


def _default_loss(pipe):
    if _embeds_apart(pipe):
        return "multiple-negatives-ranking"
    classes = len(pipe.config.get("id2label") or {}) or None
    if pipe.config.get("problem_type") == "multi_label_classification":
        return "binary-cross-entropy"
    if classes == 1:
        return _task(pipe).one_logit
    if pipe.config.get("problem_type") == "regression":
        return "mse"
    return "cross-entropy"

