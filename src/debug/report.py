"""What ``first_divergence`` found, as data and as the text ``transmuter diff`` prints."""

import dataclasses

import numpy as np

# a path longer than this prints its first and last nodes only
_PATH_SHOWN = 12


@dataclasses.dataclass
class Value:
    name: str
    description: str  # float32[1, 4], a sequence of 3
    status: str  # agrees (max |diff| ...), differs: ..., a weight, a graph input, ...
    agrees: bool | None = None  # None: not compared


@dataclasses.dataclass
class Divergence:
    """The first node whose outputs differ from onnxruntime's (or that fails in Transmuter)."""

    node: str
    op: str  # "Softmax", "com.microsoft::Attention"
    attributes: dict
    inputs: list  # Value
    outputs: list  # Value
    path: list  # from a graph input to this node: the input's name, then node labels
    note: str = ""  # why this node: a failure, a fused chain, a body
    inner: "Report | None" = None  # the node's body or fused chain, searched on its own

    def lines(self):
        out = [f"first divergence: {self.op} node {self.node!r}"]
        if self.attributes:
            out.append(f"  attributes: {_attributes(self.attributes)}")
        for title, values in (("inputs", self.inputs), ("outputs", self.outputs)):
            if values:
                out.append(f"  {title}:")
                out += [f"    {v.name}: {v.description}  {v.status}" for v in values]
        if self.path:
            shown = self.path if len(self.path) <= _PATH_SHOWN else \
                self.path[:4] + [f"... {len(self.path) - 8} nodes ..."] + self.path[-4:]
            out.append(f"  path from the input: {' -> '.join(shown)}")
        if self.note:
            out.append(f"  note: {self.note}")
        if self.inner is not None:
            out += ["    " + line for line in self.inner.lines()]
        return out


@dataclasses.dataclass
class Report:
    """``divergence`` is None when every compared value agrees."""

    divergence: Divergence | None
    compared: int  # values compared
    rtol: float
    atol: float
    noise: bool  # tolerances widened by the file's own noise (int8 graphs)
    missing: list = dataclasses.field(default_factory=list)  # (op, node) onnxruntime lacks
    where: str = ""  # which graph: "" for the model, "the then_branch of If 'x'" for a body

    @property
    def found(self):
        return self.divergence is not None

    def lines(self):
        head = f"{self.where}: " if self.where else ""
        tolerance = f"rtol={self.rtol:g}, atol={self.atol:g}" + \
            (" + the file's own noise (onnxruntime on inputs and weights moved by 1e-6)"
             if self.noise else "")
        out = []
        if self.missing:
            ops = ", ".join(f"{op} {name!r}" if name else op for op, name in self.missing[:8])
            out.append(f"{head}onnxruntime has no kernel for {ops}: those nodes and the ones "
                       "reading their values are not compared")
        values = "1 value agrees" if self.compared == 1 else f"{self.compared} values agree"
        if self.divergence is None:
            out.append(f"{head}no divergence: {values} within {tolerance}")
        else:
            out.append(f"{head}{values} within {tolerance}, then:")
            out += self.divergence.lines()
        return out

    def __str__(self):
        return "\n".join(self.lines())


def _attributes(attrs):
    def short(v):
        if isinstance(v, np.ndarray):
            return f"tensor{list(v.shape)}" if v.size > 8 else v.tolist()
        if isinstance(v, list) and len(v) > 16:
            return f"[{len(v)} values]"
        return v
    return "{" + ", ".join(f"{k}: {short(v)!r}" for k, v in attrs.items()) + "}"
