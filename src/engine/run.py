"""Eager execution: op by op, every intermediate value inspectable."""

from .runner import Runner


def run(model, inputs, *, params=None, keep_intermediates=False, checks=None):
    """Run ``model`` on ``inputs`` (name -> array) eagerly; return its outputs by name.

    With ``keep_intermediates=True`` every value the graph computed is returned too. ``checks``
    (default: the model's ``load(checks=)``) refuses inputs that index past a table."""
    inputs = model.host_inputs(dict(inputs))
    model.check_inputs(inputs)
    if model.checks if checks is None else checks:
        model.check_indices(inputs)
    runner = Runner(model.backend, model.opsets)
    with model.backend.scope():
        env = dict(model.constants)
        env.update(model.full_params(params))
        env.update({k: runner.to_device(v) for k, v in inputs.items()})
        runner.run_graph(model.graph, env)
    if keep_intermediates:
        return env
    return {name: env[name] for name in model.graph.output_names}
