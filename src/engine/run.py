"""Eager execution: op by op, every intermediate value inspectable."""

from ..errors import InputError
from .runner import Runner


def run(model, inputs, *, params=None, keep_intermediates=False, checks=None, on_node=None):
    """Run ``model`` on ``inputs`` (name -> array) eagerly; return its outputs by name.

    With ``keep_intermediates=True`` every value the graph computed is returned too. ``checks``
    (default: the model's ``load(checks=)``) refuses inputs that index past a table.
    ``on_node(node, env)`` is called after each node of the graph with the values by name (its
    inputs and outputs among them); each value leaves ``env`` after its last reader, so a run
    that looks at values as they come holds only those still needed (transmuter.debug walks
    graphs so)."""
    if on_node is not None and keep_intermediates:
        raise InputError("run(on_node=) drops values after their last reader; "
                         "keep_intermediates=True keeps them all: give one or the other")
    inputs = model.host_inputs(dict(inputs))
    model.check_inputs(inputs)
    if model.checks if checks is None else checks:
        model.check_indices(inputs)
    runner = Runner(model.backend, model.opsets)
    with model.backend.scope():
        env = dict(model.constants)
        env.update(model.full_params(params))
        env.update({k: runner.to_device(v) for k, v in inputs.items()})
        runner.run_graph(model.graph, env, on_node=on_node)
    if keep_intermediates:
        return env
    return {name: env[name] for name in model.graph.output_names}
