"""``first_divergence``: the first node where Transmuter and onnxruntime give different values.

Transmuter runs the graph eagerly (engine/run.py, ``on_node``) and onnxruntime runs it with every
value exposed (reference.py); the values are compared in the order Transmuter's nodes make them,
each as it is made, and dropped after its last reader, so a graph too large to hold every value
is walked with only the live ones. The first node with an output past the tolerance is reported
with its inputs (each compared already), attributes, and the path from the graph's input.

onnxruntime cannot expose the values inside an If, Loop or Scan body, so when the node holding a
body differs, that body is searched as a model of its own on the node's inputs (onnxruntime's
values): the branch the condition took, or the Loop's and Scan's iterations one by one until one
differs. Nodes that Transmuter fused at load (engine/passes/fusion.py) are searched member by
member, each on onnxruntime's values of its inputs."""

import collections
import os

import numpy as np
import onnx
from onnx import numpy_helper

from ..engine.graph import Graph, node_reads
from ..engine.model import Model, read_proto
from ..engine.run import run
from ..engine.runner import Runner
from ..errors import InputError, OpError, TransmuterError
from ..hub.load import load
from ..hub.repo import is_repo_source
from .compare import compare, describe, noise_of
from .reference import (
    Reference,
    body_model,
    perturbed,
    perturbed_feeds,
    quantizes_activations,
)
from .report import Divergence, Report, Value

# float32 rounding differs between XLA / MLX and onnxruntime's MLAS by ~1e-6 relative per op and
# grows through a graph; 1e-4 is the bound the tests hold whole graphs to
RTOL = ATOL = 1e-4
MAX_ITERATIONS = 1000  # Loop / Scan iterations searched one by one before giving up


def first_divergence(model, inputs, *, rtol=RTOL, atol=ATOL, backend="jax", variant=None,
                     noise=None, window=256) -> Report:
    """Run ``model`` in Transmuter (eagerly) and onnxruntime on ``inputs`` (name -> array) and
    return a ``Report`` naming the first node whose outputs differ beyond ``rtol`` / ``atol``
    (``report.divergence``; None when all agree). ``print(report)`` shows it.

    ``model``: a path to an .onnx file (its external data beside it), a Hub id or folder (with
    ``variant``), an ``onnx.ModelProto``, or a ``transmuter.Model`` loaded from a file or repo
    (its own backend is used). ``noise``: widen each value's tolerance by how much onnxruntime's
    own value moves when inputs and weights move by 1e-6 relative; None (the default) does so for
    graphs that quantize activations (int8), where a rounding tie moves a value by a step.
    ``window``: values fetched from onnxruntime per run (each fetch reruns the graph)."""
    for name, value in (("rtol", rtol), ("atol", atol)):
        if not isinstance(value, (int, float)) or value < 0:
            raise InputError(f"{name}={value!r}: give a number >= 0")
    ours, proto = _models(model, backend, variant)
    if noise is None:
        noise = quantizes_activations(proto)
    feeds = ours.host_inputs(dict(inputs))  # NumPy, in the declared dtypes: onnxruntime's too
    return _Search(ours, proto, feeds, rtol, atol, noise, window).run()


def _models(model, backend, variant):
    """(Transmuter's Model, the ModelProto with its external data read in)."""
    if isinstance(model, Model):
        if model.origin is None:
            raise InputError("This transmuter.Model was loaded from bytes or a ModelProto, which "
                             "it does not keep: give first_divergence the path or the proto")
        repo, file = model.origin
        path = repo.fetch_onnx(file) if repo is not None else file
        return model, read_proto(path)
    if isinstance(model, onnx.ModelProto):
        return load(model, backend=backend), read_proto(model)
    if is_repo_source(model):
        ours = load(model, backend=backend, variant=variant)
        repo, file = ours.origin
        return ours, read_proto(repo.fetch_onnx(file))
    if isinstance(model, (str, os.PathLike)):
        return load(model, backend=backend), read_proto(model)
    raise InputError(f"first_divergence takes a path, a Hub id or folder, an onnx.ModelProto or a "
                     f"transmuter.Model, got {type(model).__name__}")


class _Found(Exception):
    """Ends the eager run at the first divergence."""


class _Search:
    def __init__(self, ours, proto, feeds, rtol, atol, noise, window, where="", sessions=None):
        """``sessions``: the (reference, perturbed reference) of an earlier search of the same
        graph (a body's next iteration), else made here."""
        self.ours, self.proto, self.feeds = ours, proto, feeds
        self.rtol, self.atol, self.noise, self.where = rtol, atol, noise, where
        if sessions is None:
            sessions = Reference(proto), Reference(perturbed(proto)) if noise else None
        self.sessions = sessions
        self.ref = sessions[0]
        self.noisy = None if sessions[1] is None else (sessions[1], perturbed_feeds(feeds))
        order = [n for node in ours.graph.nodes for n in node.outputs if n in self.ref.names]
        self.values = _Window(self, order, window)
        self.seen = {}  # name -> Diff of each value compared so far (numbers, not arrays)
        self.last = -1  # index of the last node run
        self.found = None

    def run(self):
        graph = self.ours.graph
        try:
            run(self.ours, self.feeds, on_node=self._check)
        except _Found:
            pass
        except OpError as e:  # Transmuter failed at the node after the last one run
            node = graph.nodes[self.last + 1]
            note = f"Transmuter fails here: {e}"
            try:
                self.ref.values(node.outputs, self.feeds)
            except TransmuterError as theirs:  # not ours alone: the inputs do not fit the graph
                note += f"\n  onnxruntime fails on these inputs too: {theirs}"
            self.found = self._divergence(node, {}, {}, note=note)
        agreed = sum(d.ok for d in self.seen.values())
        return Report(self.found, agreed, self.rtol, self.atol, self.noise, self.ref.missing,
                      self.where)

    def _check(self, node, env):
        self.last += 1
        outputs = {}
        for name in node.outputs:
            if name in self.values.position:
                ref, noise = self.values.get(name)
                ours = _host(self.ours, env[name])
                diff = compare(ours, ref, self.rtol, self.atol, 2 * noise)
                self.seen[name] = diff
                outputs[name] = (ours, diff)
        if all(d.ok for _, d in outputs.values()):
            return
        reads = {n: env[n] for n in node_reads(node) if n in env}
        self.found = self._divergence(node, reads, outputs)
        try:
            self.found.inner, self.found.note = self._descend(node, reads)
        except TransmuterError as e:  # the node is found; only the search inside it failed
            self.found.note = f"searching inside this node failed: {e}"
        raise _Found

    def _divergence(self, node, reads, outputs, note="", seen=None):
        """The Divergence of ``node``: ``reads`` its input values (ours), ``outputs`` name ->
        (our value, Diff) of the outputs compared."""
        seen = self.seen if seen is None else seen
        inputs = [self._input(name, reads.get(name), seen) for name in node.inputs if name]
        outs = []
        for name in filter(None, node.outputs):
            if name not in outputs:
                outs.append(Value(name, "", "not compared: onnxruntime lacks it"))
                continue
            value, diff = outputs[name]
            outs.append(Value(name, describe(value), _status(diff), diff.ok))
        attrs = {k: v for k, v in node.attrs.items() if not _holds_graph(v) and k != "members"}
        op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
        return Divergence(node.name, op, attrs, inputs, outs, self._path(node), note)

    def _input(self, name, value, seen):
        text = describe(_host(self.ours, value)) if value is not None else ""
        if name in seen:
            return Value(name, text, _status(seen[name]), seen[name].ok)
        if name in self.feeds:
            return Value(name, text, "a graph input")
        if name in self.ours.constants or name in self.ours.params:
            return Value(name, text, "a weight")
        return Value(name, text, "not compared: onnxruntime does not expose it")

    def _path(self, node):
        """The shortest chain of nodes from a graph input to ``node``: the input's name, then
        node labels."""
        producer = {out: n for n in self.ours.graph.nodes for out in n.outputs if out}
        toward = {id(node): None}  # node -> the node it feeds on the way to ``node``
        queue = collections.deque([node])
        while queue:
            current = queue.popleft()
            for name in current.inputs:
                if name in self.feeds:
                    path, at = [name], current
                    while at is not None:
                        path.append(at.label.replace(" node", ""))
                        at = toward[id(at)]
                    return path
                made = producer.get(name)
                if made is not None and id(made) not in toward:
                    toward[id(made)] = current
                    queue.append(made)
        return []

    # --- inside a node: fused members, bodies --------------------------------------------------

    def _descend(self, node, reads):
        if "members" in node.attrs:
            return self._fused(node, reads), (
                f"Transmuter runs this node as one fused chain of {len(node.attrs['members'])} "
                "nodes (engine/passes/fusion.py); each member below ran on onnxruntime's values "
                "of its inputs")
        if any(_holds_graph(v) for v in node.attrs.values()):
            return self._body(node, reads)
        return None, ""

    def _fused(self, node, reads):
        members = [m.node for m in node.attrs["members"]]
        names = {n for m in members for n in list(m.inputs) + list(m.outputs) if n}
        ref = self.ref.values(names, self.feeds)
        env = {**reads, **ref}
        runner = Runner(self.ours.backend, self.ours.opsets)
        seen = {}
        with self.ours.backend.scope():
            for member in members:
                runner.run_node(member, env)
                outputs = {}
                for name in member.outputs:
                    if name in ref:
                        ours = _host(self.ours, env[name])
                        outputs[name] = (ours, compare(ours, ref[name], self.rtol, self.atol))
                        seen[name] = outputs[name][1]
                        env[name] = ref[name]  # the next member reads onnxruntime's value
                if not all(d.ok for _, d in outputs.values()):
                    found = self._divergence(member, env, outputs, seen={**self.seen, **seen})
                    break
            else:
                found = None
        return Report(found, sum(d.ok for d in seen.values()), self.rtol, self.atol, self.noise,
                      where=f"inside fused {node.label}")

    def _body(self, node, reads):
        """The body this node ran, searched on its own: (Report or None, note)."""
        proto_node = next((n for n in self.proto.graph.node if node.outputs[0] in n.output), None)
        if proto_node is None:
            return None, "this node holds a body, which onnxruntime cannot expose"
        bodies = {a.name: a.g for a in proto_node.attribute if a.HasField("g")}
        outer = self._outer_values(node, reads)
        args = [outer.get(n) if n else None for n in node.inputs]
        if node.op_type == "If":
            branch = "then_branch" if bool(np.asarray(args[0])) else "else_branch"
            report = self._search_body(bodies[branch], outer, {},
                                       f"the {branch} of {node.label} (its condition is "
                                       f"{bool(np.asarray(args[0]))})")[0]
            return report, ("onnxruntime cannot expose the values inside a branch: the branch "
                            "taken was searched as a model of its own on onnxruntime's values")
        if node.op_type in ("Loop", "Scan"):
            iterate = _loop_steps if node.op_type == "Loop" else _scan_steps
            body = bodies["body"]
            search = None
            for i, (feeds, advance) in enumerate(iterate(body, node, args)):
                if i >= MAX_ITERATIONS:
                    return None, (f"the first {MAX_ITERATIONS} iterations of the body of "
                                  f"{node.label} agree on onnxruntime's values; later ones "
                                  "were not searched")
                report, out, search = self._search_body(body, outer, feeds,
                                                        f"iteration {i} of the body of "
                                                        f"{node.label}", search)
                if report.found:
                    return report, ("onnxruntime cannot expose the values inside a body: its "
                                    "iterations were searched one by one as a model of their "
                                    "own, each on onnxruntime's values of the one before")
                if not advance(out):
                    break
            return None, (f"the body of {node.label} agrees in each iteration searched on "
                          "onnxruntime's values: what differs is how the node combines them")
        return None, f"{node.label} holds a body, which onnxruntime cannot expose"

    def _outer_values(self, node, reads):
        """onnxruntime's values of what ``node`` and its bodies read; graph inputs and weights
        (not computed, so the same on both sides) from the feeds and the file."""
        names = node_reads(node)
        values = self.ref.values(names, self.feeds)
        inits = {t.name: t for t in self.proto.graph.initializer}
        for name in names - set(values):
            if name in self.feeds:
                values[name] = self.feeds[name]
            elif name in inits:
                values[name] = numpy_helper.to_array(inits[name])
            elif name in reads:
                values[name] = _host(self.ours, reads[name])
        return values

    def _search_body(self, body, outer, feeds, where, search=None):
        """(Report, onnxruntime's body outputs, the search to reuse) of ``body`` on ``feeds``
        (its declared inputs) and ``outer`` (what it reads from outside)."""
        feeds = {**outer, **feeds}
        if search is None:
            proto = body_model(body, self.proto, feeds)
            ours, sessions = load(proto, backend=self.ours.backend.name), None
        else:  # the next iteration: the same model and sessions
            proto, ours, sessions = search.proto, search.ours, search.sessions
        feeds = {i.name: feeds[i.name] for i in proto.graph.input}
        search = _Search(ours, proto, feeds, self.rtol, self.atol, self.noise, self.values.size,
                         where, sessions)
        out = search.ref.values([o.name for o in body.output], feeds)
        return search.run(), [out.get(o.name) for o in body.output], search


class _Window:
    """onnxruntime's values in the order Transmuter makes them, ``size`` names per fetch; with
    the noisy reference, each value's noise (how far the perturbed run moved it)."""

    def __init__(self, search, order, size):
        self.search, self.size = search, max(1, int(size))
        self.order = list(dict.fromkeys(order))
        self.position = {name: i for i, name in enumerate(self.order)}
        self.cache, self.noise = {}, {}

    def get(self, name):
        if name not in self.cache:
            start = self.position[name]
            names = self.order[start:start + self.size]
            self.cache = self.search.ref.values(names, self.search.feeds)
            self.noise = {}
            if self.search.noisy is not None:
                ref, feeds = self.search.noisy
                moved = ref.values(names, feeds)
                self.noise = {n: noise_of(self.cache[n], moved[n]) for n in names if n in moved}
        return self.cache[name], self.noise.get(name, 0.0)


def _loop_steps(body, node, args):
    """(body feeds, advance) per iteration of a Loop; ``advance(outputs)`` is False at the end."""
    names = [i.name for i in body.input]
    trips = None if args[0] is None else int(np.asarray(args[0]))
    cond = True if len(args) < 2 or args[1] is None else bool(np.asarray(args[1]))
    carried = list(args[2:])
    i = 0
    state = {"go": cond}

    def advance(outputs):
        state["go"] = bool(np.asarray(outputs[0]))
        carried[:] = outputs[1:1 + len(carried)]
        return True

    while state["go"] and (trips is None or i < trips):
        feeds = {names[0]: np.array(i, np.int64), names[1]: np.array(state["go"])}
        feeds.update(zip(names[2:], carried))
        yield feeds, advance
        i += 1


def _scan_steps(body, node, args):
    names = [i.name for i in body.input]
    n_scan = node.attrs["num_scan_inputs"]
    states, scans = list(args[:len(args) - n_scan]), args[len(args) - n_scan:]
    axes = node.attrs.get("scan_input_axes") or [0] * n_scan
    directions = node.attrs.get("scan_input_directions") or [0] * n_scan
    length = np.asarray(scans[0]).shape[axes[0]]

    def advance(outputs):
        states[:] = outputs[:len(states)]
        return True

    for t in range(length):
        slices = [np.take(np.asarray(x), length - 1 - t if d else t, axis=a)
                  for x, a, d in zip(scans, axes, directions)]
        yield dict(zip(names, states + slices)), advance


def _status(diff):
    return ("agrees: " if diff.ok else "differs: ") + str(diff)


def _host(model, value):
    if value is None or isinstance(value, np.ndarray):
        return value
    if isinstance(value, list):
        return [_host(model, v) for v in value]
    if isinstance(value, (np.generic, int, float, bool)):
        return np.asarray(value)
    return model.backend.to_host(value)


def _holds_graph(value):
    return isinstance(value, Graph) or (isinstance(value, list) and value
                                        and isinstance(value[0], Graph))
