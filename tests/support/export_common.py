"""Shared helpers for the tiny-model fixture factories in ``tests/support/``.

Run only in the export environment (``tests/support/requirements-export.txt``); the default test
suite never imports this module. Other family scripts (vision, audio, genai) may import from it, so
the public functions below keep their signatures; add new helpers rather than changing these.

Public API (stable):

Tokenizers (all trained offline on :data:`CORPUS`, deterministic):
    ``train_wordpiece_vocab(path, vocab_size, lowercase)``      -> writes a BERT ``vocab.txt``
    ``train_bytelevel_bpe(folder, vocab_size, special_tokens)`` -> writes ``vocab.json`` + ``merges.txt``
    ``train_sentencepiece(model_path, vocab_size, model_type, **options)`` -> writes a ``.model`` file

Export / variants:
    ``export_optimum(model, tokenizer, task, out_dir, opset, *, eager, split_decoder)``
        saves the torch model to a scratch folder and runs optimum-onnx ``main_export`` on it.
    ``quantize_int8(src, dst)``   onnxruntime ``quantize_dynamic``: int8 weights, per-tensor
    ``convert_fp16(src, dst)``    onnxruntime.transformers ``convert_float_to_float16``, keep_io_types
    ``quantize_q4(src, dst)``     onnxruntime ``MatMulNBitsQuantizer``: 4 bits, block 32, symmetric
    ``quantize_q4f16(src, dst)``  ``quantize_q4``, then ``convert_fp16`` (transformers.js' order)
    ``variant_of_merged(fn, decoder, decoder_with_past, dst)``  variant of the two graphs, then merge

References (``references/<stem>.npz``, keys ``"{step}/in/{name}"``, ``"{step}/out/{name}"``):
    ``ort_session(path)``             ORT session, ``ORT_DISABLE_ALL``, one thread
    ``run_steps(path, steps_inputs)`` runs a list of feeds, returns ``[(inputs, outputs), ...]``
    ``encoder_reference(path, feeds)``
    ``decoder_reference(path, input_ids, attention_mask, n_cached)``
    ``seq2seq_reference(encoder_path, decoder_path, input_ids, attention_mask, start_id, n_cached)``
    ``save_reference(path, steps)`` / ``load_reference(path)``

Fixture bookkeeping:
    ``write_manifest(fixture_dir, family, architecture, task, opset, graphs, exporter=...)``
    ``save_pipeline_record(path, task, calls)`` / ``to_jsonable(obj)``
    ``verify_fixture(fixture_dir)``  onnx.checker + rerun every recorded step, exact comparison
    ``dir_size(path)``
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

FIXTURES_ROOT = Path(__file__).resolve().parents[1] / "fixtures"
SEED = 0
EXPORTER = "optimum-onnx 0.1.0 main_export"

# A small built-in English corpus (written for these fixtures) used to train every tokenizer.
CORPUS: list[str] = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world! This is a tiny test of the tokenizer.",
    "My name is Sarah and I live in London.",
    "My name is Wolfgang and I live in Berlin.",
    "Clara works for the United Nations in New York.",
    "John Smith visited Paris with his friend Maria last summer.",
    "The weather today is sunny, warm and very pleasant.",
    "I love this movie, it is wonderful and the actors are great!",
    "I hate waiting in long lines; it is boring and slow.",
    "This film was terrible, the story made no sense at all.",
    "What a beautiful day to go for a walk in the park.",
    "The capital of France is Paris, and the capital of Germany is Berlin.",
    "Where do you live? I live in a small house near the river.",
    "How many people work at the company? About one hundred people work there.",
    "Translate English to German: The house is wonderful.",
    "Summarize: The cat sat on the mat and looked out of the window all afternoon.",
    "Machine learning models can translate text, answer questions and write stories.",
    "Once upon a time, there was a little girl who lived in a village near the forest.",
    "She opened the door, looked around, and smiled at the old man.",
    "The children played football in the garden until it was dark.",
    "We will meet at the station at nine o'clock tomorrow morning.",
    "Please send me the report before Friday, thank you.",
    "Computers process numbers like 1, 2, 3, 42 and 1000 very quickly.",
    "The museum opened in 1990 and has more than 5000 paintings.",
    "Amazon, Google and Microsoft are large technology companies.",
    "Dr. Alice Brown teaches physics at the University of Cambridge.",
    "The train from Madrid to Lisbon was late again.",
    "Water boils at one hundred degrees and freezes at zero.",
    "He said: \"I don't know, but I'll find out.\"",
    "It's a good idea to read a book every week.",
    "The best way to learn is to practice every day.",
    "Birds sing in the trees while the sun rises over the hills.",
    "A journey of a thousand miles begins with a single step.",
    "To be, or not to be, that is the question.",
    "All that glitters is not gold.",
    "The river flows quietly through the green valley.",
    "Our team won the game by three points last night.",
    "Can you help me find the nearest hospital, please?",
    "The answer to the question is hidden in the text.",
    "Music makes people happy and brings them together.",
]

CHARS_EXTRA = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,;:!?'\"()-[]"


# --------------------------------------------------------------------------------------------
# determinism
# --------------------------------------------------------------------------------------------


def seed_everything(seed: int = SEED) -> None:
    """Fix python / numpy / torch seeds (call before building each model)."""
    import random

    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)


# --------------------------------------------------------------------------------------------
# tokenizers
# --------------------------------------------------------------------------------------------


def train_wordpiece_vocab(path: str | Path, vocab_size: int = 600, lowercase: bool = True) -> Path:
    """Build a BERT WordPiece vocabulary from :data:`CORPUS`; write it as ``vocab.txt`` at ``path``.

    ``tokenizers``' WordPieceTrainer breaks ties in hash order (a different vocabulary on each run),
    so this is a small deterministic builder instead: the five BERT specials, every character and
    its ``##`` form, then whole words, word prefixes and ``##`` suffixes (2-6 chars) ranked by
    ``count * length`` (ties by text), until ``vocab_size``. Normalization and pre-tokenization are
    BERT's (``BertNormalizer``, ``BertPreTokenizer``), so the vocabulary matches what
    ``BertTokenizerFast`` splits.
    """
    from collections import Counter

    from tokenizers import normalizers, pre_tokenizers

    norm = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=lowercase)
    pre = pre_tokenizers.BertPreTokenizer()
    words: Counter[str] = Counter()
    for line in CORPUS + [CHARS_EXTRA]:
        for w, _ in pre.pre_tokenize_str(norm.normalize_str(line)):
            words[w] += 1
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = sorted({c for w in words for c in w})
    vocab = specials + chars + ["##" + c for c in chars]
    cand: Counter[str] = Counter()
    for w, n in words.items():
        if len(w) > 1:
            cand[w] += n
        for k in range(2, min(6, len(w) - 1) + 1):
            cand[w[:k]] += n
            cand["##" + w[-k:]] += n
    ranked = sorted(cand.items(), key=lambda kv: (-kv[1] * len(kv[0].lstrip("#")), kv[0]))
    seen = set(vocab)
    for tok, _ in ranked:
        if len(vocab) >= vocab_size:
            break
        if tok not in seen:
            vocab.append(tok)
            seen.add(tok)
    path = Path(path)
    path.write_text("".join(f"{t}\n" for t in vocab), encoding="utf-8")
    return path


def train_bytelevel_bpe(
    folder: str | Path, vocab_size: int = 600, special_tokens: Sequence[str] = ("<|endoftext|>",)
) -> tuple[Path, Path]:
    """Train a GPT-2 style byte-level BPE on :data:`CORPUS`; write ``vocab.json`` and ``merges.txt``.

    The special tokens get the first ids (0, 1, ...), then the 256 byte symbols, then the merges.
    """
    from tokenizers import ByteLevelBPETokenizer

    tok = ByteLevelBPETokenizer(add_prefix_space=False)
    tok.train_from_iterator(
        CORPUS, vocab_size=vocab_size, min_frequency=1, special_tokens=list(special_tokens), show_progress=False
    )
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save_model(str(folder))
    return folder / "vocab.json", folder / "merges.txt"


def train_sentencepiece(
    model_path: str | Path, vocab_size: int = 400, model_type: str = "unigram", **options: Any
) -> Path:
    """Train a sentencepiece model on :data:`CORPUS` and write it to ``model_path`` (a ``.model`` file).

    ``options`` go to ``SentencePieceTrainer.train`` (e.g. ``unk_id=2, eos_id=1, pad_id=0, bos_id=-1``,
    ``byte_fallback=True``). Training is single-threaded for determinism.
    """
    import io

    import sentencepiece as spm

    model_path = Path(model_path)
    model_path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    kwargs = dict(
        sentence_iterator=iter(CORPUS + [CHARS_EXTRA]),
        model_writer=buf,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=1.0,
        num_threads=1,
        hard_vocab_limit=False,
        shuffle_input_sentence=False,
        minloglevel=2,
    )
    kwargs.update(options)
    spm.SentencePieceTrainer.train(**kwargs)
    model_path.write_bytes(buf.getvalue())
    return model_path


# --------------------------------------------------------------------------------------------
# export
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _legacy_decoder_split():
    """Make optimum-onnx export a decoder-only model as ``decoder_model`` + ``decoder_with_past_model``.

    optimum-onnx 0.1.0 exports ``text-generation-with-past`` as one ``model.onnx``; the older
    (``legacy=True``) layout the Xenova repos have is two graphs that ``TextDecoderOnnxConfig.
    post_process_exported_models`` then merges into ``decoder_model_merged.onnx`` (an ``If`` on
    ``use_cache_branch``). This swaps in the two-graph split for the duration of the block.
    """
    import optimum.exporters.utils as eu

    original = eu.get_decoder_models_for_export

    def split(model, config):
        def make(use_past_in_inputs: bool):
            return config.__class__(
                model.config,
                task=config.task,
                int_dtype=config.int_dtype,
                float_dtype=config.float_dtype,
                use_past=True,
                use_past_in_inputs=use_past_in_inputs,
            )

        return {
            "decoder_model": (model, make(False)),
            "decoder_with_past_model": (model, make(True)),
        }

    eu.get_decoder_models_for_export = split
    try:
        yield
    finally:
        eu.get_decoder_models_for_export = original


@contextlib.contextmanager
def _eager_attention():
    """Make ``main_export`` load the model with ``attn_implementation="eager"`` (a key in config.json
    is not honoured by ``from_pretrained``, and main_export has no argument for it)."""
    from optimum.exporters.tasks import TasksManager

    original = TasksManager.get_model_from_task

    def load(*args, **kwargs):
        kwargs["attn_implementation"] = "eager"
        model = original(*args, **kwargs)
        if model.config._attn_implementation != "eager":
            raise RuntimeError(f"eager attention not applied: {model.config._attn_implementation}")
        return model

    TasksManager.get_model_from_task = staticmethod(load)
    try:
        yield
    finally:
        TasksManager.get_model_from_task = staticmethod(original)


def export_optimum(
    model,
    tokenizer,
    task: str,
    out_dir: str | Path,
    opset: int = 18,
    *,
    eager: bool = False,
    split_decoder: bool = False,
    keep: Iterable[str] | None = None,
) -> list[Path]:
    """Export ``model`` with optimum-onnx ``main_export`` and copy the ``.onnx`` files to ``out_dir``.

    The model (and tokenizer) are saved to a scratch folder that ``main_export`` loads from;
    torch weights never reach ``out_dir``. ``eager=True`` loads the model with
    ``attn_implementation="eager"``; ``split_decoder=True`` exports a decoder-only model in the
    legacy ``decoder_model`` / ``decoder_with_past_model`` / ``decoder_model_merged`` layout.
    ``keep`` limits which ``.onnx`` files are copied (names without folder). Returns the copied paths.
    """
    from optimum.exporters.onnx import main_export

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "torch")
        dst = Path(tmp, "onnx")
        model.save_pretrained(src)
        if tokenizer is not None:
            tokenizer.save_pretrained(src)
        with contextlib.ExitStack() as stack:
            if split_decoder:
                stack.enter_context(_legacy_decoder_split())
            if eager:
                stack.enter_context(_eager_attention())
            main_export(
                str(src),
                output=str(dst),
                task=task,
                opset=opset,
                device="cpu",
                local_files_only=True,
                do_validation=True,
            )
        copied = []
        for f in sorted(dst.glob("*.onnx")):
            if keep is not None and f.name not in keep:
                continue
            if Path(str(f) + "_data").exists() or any(dst.glob("*.onnx_data")):
                raise RuntimeError(f"{f} uses external data; fixtures must be single files")
            shutil.copyfile(f, out_dir / f.name)
            copied.append(out_dir / f.name)
    return copied


def _save_onnx(model, dst: str | Path) -> None:
    import onnx

    onnx.save_model(model, str(dst), save_as_external_data=False)


def quantize_int8(src: str | Path, dst: str | Path) -> Path:
    """``_quantized`` variant: dynamic quantization, int8 weights, per-tensor (``quantize_dynamic``).

    Subgraphs (the merged decoder's ``If`` branches) are quantized too, and only MatMuls with a
    constant B are converted, as transformers.js' ``scripts/quantize.py`` does.
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        str(src),
        str(dst),
        weight_type=QuantType.QInt8,
        per_channel=False,
        reduce_range=False,
        extra_options={"EnableSubgraph": True, "MatMulConstBOnly": True},
    )
    return Path(dst)


def convert_fp16(src: str | Path, dst: str | Path) -> Path:
    """``_fp16`` variant: onnxruntime.transformers ``convert_float_to_float16`` with ``keep_io_types=True``.

    Like transformers.js' ``scripts/quantize.py`` (which makes the Xenova ``*_fp16.onnx``): weights
    and compute are float16, graph inputs and outputs keep their float32 types (ids stay int64).
    """
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(src))
    model16 = convert_float_to_float16(model, keep_io_types=True)
    _toposort(model16.graph)  # the converter appends its Casts at the end (transformers.js re-sorts too)
    _save_onnx(model16, dst)
    return Path(dst)


def variant_of_merged(
    fn, decoder: str | Path, decoder_with_past: str | Path, dst: str | Path, strict: bool = True
) -> Path:
    """Make a merged-decoder variant by applying ``fn(src, dst)`` to the two unmerged graphs
    (``decoder_model.onnx``, ``decoder_with_past_model.onnx``) and merging the results with
    optimum's ``merge_decoders`` (``strict=False`` for seq2seq, as optimum merges those).

    Used for ``_fp16``: onnxruntime's ``convert_float_to_float16(keep_io_types=True)`` breaks an
    already merged graph (it renames values inside the ``If`` branches but not the branch outputs,
    and inserts casts that reference renamed outer values), so the fp16 merged decoder is built
    the way optimum builds any merged decoder: convert each branch, then merge.
    """
    from optimum.onnx import merge_decoders

    dst = Path(dst)
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp, "decoder.onnx"), Path(tmp, "decoder_with_past.onnx")
        fn(decoder, a)
        fn(decoder_with_past, b)
        _prefix_cast_names(a, "decoder_")
        _prefix_cast_names(b, "decoder_with_past_")
        merge_decoders(decoder=a, decoder_with_past=b, save_path=dst, strict=strict)
    return dst


def _toposort(graph) -> None:
    """Topologically sort ``graph.node`` in place (stable; subgraphs too). Values not produced in
    the graph (inputs, initializers, outer scope) count as available."""
    import onnx

    produced = {o for n in graph.node for o in n.output if o}
    for n in graph.node:
        for attr in n.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                _toposort(attr.g)

    def needs(n):
        req = {x for x in n.input if x}
        for attr in n.attribute:  # outer-scope values a subgraph reads
            if attr.type == onnx.AttributeProto.GRAPH:
                inner = {o for m in attr.g.node for o in m.output} | {i.name for i in attr.g.input}
                inner |= {i.name for i in attr.g.initializer}
                req |= {x for m in attr.g.node for x in m.input if x and x not in inner}
        return req & produced

    pending = list(graph.node)
    ready: set[str] = set()
    ordered = []
    while pending:
        rest = []
        for n in pending:
            if needs(n) <= ready:
                ordered.append(n)
                ready.update(o for o in n.output if o)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            raise RuntimeError("graph has a cycle")
        pending = rest
    copies = [onnx.NodeProto() for _ in ordered]
    for c, n in zip(copies, ordered):
        c.CopyFrom(n)
    del graph.node[:]
    graph.node.extend(copies)


def _prefix_cast_names(path: Path, prefix: str) -> None:
    """Rename the fp16 converter's ``graph_input_cast_*`` / ``graph_output_cast_*`` values and
    nodes so the two graphs of a merge do not collide."""
    import onnx

    model = onnx.load(str(path))
    tags = ("graph_input_cast", "graph_output_cast")

    def ren(name: str) -> str:
        return prefix + name if name.startswith(tags) else name

    def walk(graph):
        for n in graph.node:
            n.name = ren(n.name)
            n.input[:] = [ren(x) for x in n.input]
            n.output[:] = [ren(x) for x in n.output]
            for attr in n.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g)
        for v in list(graph.value_info) + list(graph.output):
            v.name = ren(v.name)

    walk(model.graph)
    _save_onnx(model, path)


def quantize_q4(src: str | Path, dst: str | Path, block_size: int = 32) -> Path:
    """``_q4`` variant: ``MatMulNBitsQuantizer`` (4 bits, block 32, symmetric, default RTN, QOperator).

    MatMuls with a constant 2-D weight become ``com.microsoft.MatMulNBits``; everything else stays fp32.
    """
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    model = onnx.load(str(src))
    q = MatMulNBitsQuantizer(model, bits=4, block_size=block_size, is_symmetric=True)
    q.process()
    _save_onnx(q.model.model, dst)
    return Path(dst)


def quantize_q4f16(src: str | Path, dst: str | Path, block_size: int = 32) -> Path:
    """``_q4f16`` variant, as transformers.js' ``scripts/quantize.py`` makes it: ``quantize_q4``
    first (MatMulNBits, f32 scales), then ``convert_fp16`` of that graph (the scales, the other
    weights and the compute become float16; inputs and outputs keep their types)."""
    with tempfile.TemporaryDirectory() as tmp:
        q4 = quantize_q4(src, Path(tmp, "q4.onnx"), block_size=block_size)
        return convert_fp16(q4, dst)


# --------------------------------------------------------------------------------------------
# references
# --------------------------------------------------------------------------------------------


def ort_session(path: str | Path):
    """An onnxruntime CPU session with graph optimizations disabled, single-threaded."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


Step = tuple[dict[str, np.ndarray], dict[str, np.ndarray]]


def _run(sess, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def run_steps(path: str | Path, steps_inputs: Sequence[dict[str, np.ndarray]]) -> list[Step]:
    """Run each feed dict through ``path`` (fresh session); return ``[(inputs, outputs), ...]``."""
    sess = ort_session(path)
    return [(dict(f), _run(sess, f)) for f in steps_inputs]


def encoder_reference(path: str | Path, feeds: dict[str, np.ndarray]) -> list[Step]:
    """One step; only the feeds the graph declares are passed (and recorded)."""
    sess = ort_session(path)
    names = {i.name for i in sess.get_inputs()}
    missing = names - set(feeds)
    if missing:
        raise KeyError(f"{path}: no value for inputs {sorted(missing)}")
    f = {k: v for k, v in feeds.items() if k in names}
    return [(f, _run(sess, f))]


_ORT_DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64}


def _empty_past(sess, batch: int) -> dict[str, np.ndarray]:
    past = {}
    for i in sess.get_inputs():
        if i.name.startswith("past_key_values."):
            shape = list(i.shape)
            heads, head_dim = shape[1], shape[3]
            assert isinstance(heads, int) and isinstance(head_dim, int), (i.name, shape)
            past[i.name] = np.zeros((batch, heads, 0, head_dim), dtype=_ORT_DTYPES[i.type])
    return past


def position_ids_from_mask(mask: np.ndarray) -> np.ndarray:
    """transformers' rule for left-padded batches: cumsum(mask) - 1, padded slots set to 1."""
    pos = np.cumsum(mask, axis=-1) - 1
    pos[mask == 0] = 1
    return pos.astype(np.int64)


def decoder_reference(
    path: str | Path, input_ids: np.ndarray, attention_mask: np.ndarray, n_cached: int = 3
) -> list[Step]:
    """Greedy decoder-only run: the prompt step, then ``n_cached`` KV-cache steps of one token.

    Works for a merged decoder (``use_cache_branch``: False on the prompt, True after), for a
    ``model.onnx`` with past inputs (empty past of length 0 on the prompt) and for a no-past
    ``decoder_model.onnx`` (prompt step only). ``position_ids`` are fed when the graph has them.
    Each step's inputs are recorded in full.
    """
    sess = ort_session(path)
    in_names = {i.name for i in sess.get_inputs()}
    batch = input_ids.shape[0]
    mask = attention_mask.astype(np.int64)
    feeds = {"input_ids": input_ids.astype(np.int64), "attention_mask": mask}
    if "position_ids" in in_names:
        feeds["position_ids"] = position_ids_from_mask(mask)
    feeds.update(_empty_past(sess, batch))
    if "use_cache_branch" in in_names:
        feeds["use_cache_branch"] = np.array([False])
    has_past = any(n.startswith("past_key_values.") for n in in_names)
    steps = []
    for step in range(n_cached + 1 if has_past else 1):
        out = _run(sess, feeds)
        steps.append((feeds, out))
        nxt = out["logits"][:, -1, :].argmax(-1).astype(np.int64)[:, None]
        mask = np.concatenate([feeds["attention_mask"], np.ones((batch, 1), np.int64)], axis=1)
        new = {"input_ids": nxt, "attention_mask": mask}
        if "position_ids" in in_names:
            new["position_ids"] = feeds["position_ids"][:, -1:] + 1
        for n in in_names:
            if n.startswith("past_key_values."):
                new[n] = out["present." + n[len("past_key_values.") :]]
        if "use_cache_branch" in in_names:
            new["use_cache_branch"] = np.array([True])
        feeds = new
    return steps


def seq2seq_reference(
    encoder_path: str | Path,
    decoder_path: str | Path,
    input_ids: np.ndarray,
    attention_mask: np.ndarray,
    decoder_start_token_id: int,
    n_cached: int = 3,
) -> tuple[list[Step], list[Step]]:
    """Encoder step 0, then the merged decoder: first step (``use_cache_branch`` False, empty past)
    and ``n_cached`` cached steps (decoder past = previous present; encoder past = the first step's
    cross-attention present, which the cached branch does not recompute). Greedy."""
    enc_steps = encoder_reference(
        encoder_path, {"input_ids": input_ids.astype(np.int64), "attention_mask": attention_mask.astype(np.int64)}
    )
    hidden = enc_steps[0][1]["last_hidden_state"]
    sess = ort_session(decoder_path)
    in_names = {i.name for i in sess.get_inputs()}
    batch = input_ids.shape[0]
    feeds = {
        "encoder_attention_mask": attention_mask.astype(np.int64),
        "input_ids": np.full((batch, 1), decoder_start_token_id, np.int64),
        "encoder_hidden_states": hidden,
    }
    feeds.update(_empty_past(sess, batch))
    if "use_cache_branch" in in_names:
        feeds["use_cache_branch"] = np.array([False])
    feeds = {k: v for k, v in feeds.items() if k in in_names}
    steps = []
    encoder_kv: dict[str, np.ndarray] = {}
    for step in range(n_cached + 1):
        out = _run(sess, feeds)
        steps.append((feeds, out))
        if step == 0:
            encoder_kv = {
                "past_key_values." + k[len("present.") :]: v for k, v in out.items() if ".encoder." in k
            }
        nxt = out["logits"][:, -1, :].argmax(-1).astype(np.int64)[:, None]
        new = {k: feeds[k] for k in ("encoder_attention_mask", "encoder_hidden_states") if k in feeds}
        new["input_ids"] = nxt
        for n in in_names:
            if n.startswith("past_key_values."):
                new[n] = encoder_kv[n] if ".encoder." in n else out["present." + n[len("past_key_values.") :]]
        if "use_cache_branch" in in_names:
            new["use_cache_branch"] = np.array([True])
        feeds = new
    return enc_steps, steps


def save_reference(path: str | Path, steps: Sequence[Step]) -> Path:
    """Write steps as ``{step}/in/{name}`` / ``{step}/out/{name}`` arrays (compressed ``.npz``)."""
    arrays = {}
    for i, (ins, outs) in enumerate(steps):
        for k, v in ins.items():
            arrays[f"{i}/in/{k}"] = np.asarray(v)
        for k, v in outs.items():
            arrays[f"{i}/out/{k}"] = np.asarray(v)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_npz(path, arrays)
    return path


def _write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Like ``np.savez_compressed`` but byte-reproducible (fixed zip timestamps, sorted keys)."""
    import io
    import zipfile

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for key in sorted(arrays, key=lambda k: (int(k.split("/", 1)[0]), k)):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(arrays[key]), allow_pickle=False)
            info = zipfile.ZipInfo(key + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue())


def load_reference(path: str | Path) -> list[Step]:
    """Inverse of :func:`save_reference`."""
    data = np.load(path)
    steps: dict[int, Step] = {}
    for key in data.files:
        step, kind, name = key.split("/", 2)
        ins, outs = steps.setdefault(int(step), ({}, {}))
        (ins if kind == "in" else outs)[name] = data[key]
    return [steps[i] for i in sorted(steps)]


# --------------------------------------------------------------------------------------------
# fixture bookkeeping
# --------------------------------------------------------------------------------------------


def write_manifest(
    fixture_dir: str | Path,
    family: str,
    architecture: str,
    task: str,
    opset: int,
    graphs: dict[str, dict[str, Any]],
    exporter: str = EXPORTER,
) -> Path:
    """Write ``manifest.json`` per tests/support/README.md. ``graphs`` maps ``onnx/<file>`` to
    ``{"reference": "references/<stem>.npz", "static_inputs": [...]}``."""
    manifest = {
        "family": family,
        "architecture": architecture,
        "exporter": exporter,
        "opset": opset,
        "task": task,
        "graphs": {k: graphs[k] for k in sorted(graphs)},
    }
    path = Path(fixture_dir, "manifest.json")
    path.write_text(json.dumps(manifest, indent=2) + "\n")
    return path


def to_jsonable(obj: Any) -> Any:
    """Convert pipeline outputs (numpy scalars/arrays, tensors, tuples) into plain JSON values."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if hasattr(obj, "detach"):
        return obj.detach().cpu().numpy().tolist()
    return obj


def save_pipeline_record(path: str | Path, task: str, calls: Sequence[dict[str, Any]], **extra: Any) -> Path:
    """Write ``references/pipeline_<task>.json``.

    Layout: ``{"task": ..., <extra>..., "calls": [{"inputs": [...], "call_kwargs": {...},
    "outputs": [...]}, ...]}`` where ``outputs[i]`` is ``pipe(inputs[i], **call_kwargs)`` (each input
    passed on its own, batch size 1)."""
    record = {"task": task}
    record.update({k: to_jsonable(v) for k, v in extra.items()})
    record["calls"] = [
        {k: to_jsonable(c[k]) for k in ("inputs", "call_kwargs", "outputs")} for c in calls
    ]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    return path


def verify_fixture(fixture_dir: str | Path) -> None:
    """``onnx.checker.check_model`` on every graph in the manifest, then rerun each recorded step
    with a fresh ORT session (``ORT_DISABLE_ALL``) and require bit-identical outputs."""
    import onnx

    fixture_dir = Path(fixture_dir)
    manifest = json.loads((fixture_dir / "manifest.json").read_text())
    for graph, info in manifest["graphs"].items():
        onnx.checker.check_model(str(fixture_dir / graph))
        sess = ort_session(fixture_dir / graph)
        declared = {i.name for i in sess.get_inputs()}
        for step, (ins, outs) in enumerate(load_reference(fixture_dir / info["reference"])):
            if set(ins) != declared:
                raise AssertionError(f"{graph} step {step}: inputs {sorted(ins)} != graph {sorted(declared)}")
            got = _run(sess, ins)
            if set(got) != set(outs):
                raise AssertionError(f"{graph} step {step}: outputs differ in names")
            for k, v in outs.items():
                if got[k].dtype != v.dtype or got[k].shape != v.shape or not np.array_equal(got[k], v):
                    raise AssertionError(f"{graph} step {step}: output {k} not reproduced")


def dir_size(path: str | Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def reset_dir(path: str | Path) -> Path:
    """Delete and recreate a fixture folder."""
    path = Path(path)
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def run_fixtures(script: str, fixtures, build, argv: list[str]) -> int:
    """The command line of a family script: build the named fixtures (default: all), each in a
    fresh interpreter with PYTHONHASHSEED=0. torch.onnx numbers values (``onnx::MatMul_730``) with
    a process-wide counter and optimum's merge_decoders iterates over sets of value names, so a
    fixture's bytes would otherwise depend on what ran before it in the same process."""
    import subprocess
    import sys
    import time
    import warnings

    if "--list" in argv:
        print("\n".join(fixtures))
        return 0
    if argv[:1] == ["--one"]:
        warnings.filterwarnings("ignore")
        build(argv[1])
        return 0
    names = argv or list(fixtures)
    unknown = [n for n in names if n not in fixtures]
    if unknown:
        raise SystemExit(f"unknown fixtures: {unknown}; known: {list(fixtures)}")
    start = time.time()
    env = dict(os.environ, PYTHONHASHSEED="0")
    for name in names:
        t0 = time.time()
        subprocess.run([sys.executable, script, "--one", name], check=True, env=env)
        print(f"{name}: {dir_size(FIXTURES_ROOT / name) / 1e6:.2f} MB in {time.time() - t0:.1f}s",
              flush=True)
    total = sum(dir_size(FIXTURES_ROOT / n) for n in names) / 1e6
    print(f"done: {len(names)} fixtures, {total:.2f} MB, in {time.time() - start:.1f}s")
    return 0
