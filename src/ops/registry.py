"""Operator registry: (domain, op_type) -> versions, each a function whose signature is the spec.

An op function takes the array namespace first, then its inputs positionally (a missing optional
input is None), then its attributes as keywords with their ONNX defaults:

    @op("Softmax", since=13)
    def softmax(xp, x, *, axis=-1): ...

Registration metadata tells the runner what it needs, so the runner never branches on op names:
- ``static``: input positions that must be known on the host (Reshape's shape, Slice's starts...).
- ``host``: the output shape depends on input values (NonZero, Unique): the op always runs on the
  host, on concrete values.
- ``random``: the op draws random values: it is never folded on the host, and its ``ctx.rng`` is
  the key threaded through the run (a new key each call of a compiled function).
- ``context``: the op receives ``ctx=`` (number of outputs, random key, opset, node name).
- ``subgraphs``: the op receives GRAPH attributes as callables and ``ctx``.
- ``raw``: inputs arrive as they are (host values stay on the host beside device ones): control
  flow decides itself what it can read on the host and what it must trace.
- ``weights``: {input position: fn(value, node)}: how the op prefers a weight stored when its
  node is that weight's only reader; the model applies ``fn`` to the initializer once, at load
  (MatMulNBits keeps its packed bytes as uint32 words and its zero points as floats).
- ``indices``: {input position: bounds.Along / bounds.Leading}: that input indexes another
  (Gather's indices into its data); out-of-range values are refused on the host
  (engine/checks/indices.py), since a compiled gather cannot raise.
"""

import dataclasses
from typing import Callable

DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclasses.dataclass(frozen=True)
class OpDef:
    domain: str
    op_type: str
    since: int
    fn: Callable
    static: tuple = ()
    host: bool = False
    context: bool = False
    raw: bool = False
    random: bool = False
    weights: tuple = ()  # (input position, fn) pairs
    dequantizes: bool = False  # multiplies by weights it dequantizes (backend.compile's hint)
    indices: tuple = ()  # (input position, bounds spec) pairs

    def needs_static(self, i: int, n_inputs: int) -> bool:
        if self.static == "all":
            return True
        return i in self.static or (i - n_inputs) in self.static


_REGISTRY: dict = {}


def _norm_domain(domain: str) -> str:
    return "" if domain in DEFAULT_DOMAINS else domain


def op(op_type: str, since: int = 1, *, domain: str = "", static=(), host=False, context=False,
       raw=False, random=False, weights=None, dequantizes=False, indices=None):
    """Register ``fn`` as ``op_type`` from opset version ``since`` on."""

    def register(fn):
        key = (_norm_domain(domain), op_type)
        _REGISTRY.setdefault(key, []).append(
            OpDef(_norm_domain(domain), op_type, since, fn, tuple(static) if static != "all" else "all",
                  host, context, raw, random, tuple(sorted((weights or {}).items())),
                  dequantizes, tuple(sorted((indices or {}).items()))))
        _REGISTRY[key].sort(key=lambda d: d.since)
        return fn

    return register


def lookup(domain: str, op_type: str, opset: int):
    """The newest version of ``op_type`` with ``since <= opset``, or None."""
    versions = _REGISTRY.get((_norm_domain(domain), op_type), [])
    found = None
    for d in versions:
        if d.since <= opset:
            found = d
    return found


def registered():
    """All (domain, op_type) pairs that have an implementation."""
    return sorted(_REGISTRY)


class NeedsStatic(Exception):
    """Raised by an op that cannot go on with a traced value: the runner reads ``inputs`` (input
    positions) to the host and calls the op again; with no positions, the node runs eagerly."""

    def __init__(self, *inputs):
        super().__init__(inputs)
        self.inputs = inputs
