"""A wrong op planted for a test: its implementation replaced by a mutated one, so that a tool
that looks for where Transmuter and onnxruntime differ has something to find."""

import dataclasses

from transmuter.ops import registry


def replace_op(monkeypatch, op_type, make, domain=""):
    """Every version of ``op_type`` runs ``make(its true function)`` instead (load resolves ops
    from the registry, so models loaded after this see it)."""
    key = (domain, op_type)
    monkeypatch.setitem(registry._REGISTRY, key, [dataclasses.replace(d, fn=make(d.fn))
                                                  for d in registry._REGISTRY[key]])


def plant(monkeypatch, op_type, domain="", change=lambda y: y * 1.5 + 0.25):
    """Every version of ``op_type`` returns ``change`` of its true output (its first output,
    when it has several)."""
    def mutated(fn):
        def wrong(*args, **kwargs):
            out = fn(*args, **kwargs)
            return (change(out[0]),) + tuple(out[1:]) if isinstance(out, tuple) else change(out)
        return wrong

    replace_op(monkeypatch, op_type, mutated, domain)
