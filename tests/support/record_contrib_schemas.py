"""Records ONNX Runtime's schemas of the com.microsoft ops Transmuter runs (and of its own ops in
the default domain that onnx does not define: SimplifiedLayerNormalization) into
src/ops/contrib/schemas.py: each op's inputs and outputs (name, type parameter, optional or
not), its type constraints and its attributes' types. engine/checks/validate.py checks contrib nodes against it
as onnx.checker checks standard ones (onnx has no schema for them; onnxruntime is no dependency).

    python tests/support/record_contrib_schemas.py   # any python with onnxruntime and transmuter
"""

import json
import pathlib

import onnx

from onnxruntime.capi import onnxruntime_pybind11_state as C

from transmuter.ops import registry

OUT = pathlib.Path(__file__).resolve().parents[2] / "src" / "ops" / "contrib" / "schemas.py"


def _formal(p):
    return [p.name, p.typeStr, p.option.name]


def main():
    ours = sorted(k[1] for k in registry._REGISTRY if k[0] == "com.microsoft")
    default = sorted(k[1] for k in registry._REGISTRY if k[0] == "" and not onnx.defs.has(k[1]))
    table, own = {}, {}
    for s in C.get_all_operator_schema():
        if s.domain == "com.microsoft" and s.name in ours:
            into = table
        elif s.domain == "" and s.name in default:
            into = own
        else:
            continue
        into[s.name] = {
            "since": s.since_version,
            "inputs": [_formal(p) for p in s.inputs],
            "outputs": [_formal(p) for p in s.outputs],
            "types": {t.type_param_str: sorted(t.allowed_type_strs) for t in s.type_constraints},
            "attributes": {k: a.type.name for k, a in sorted(s.attributes.items())},
        }
    import onnxruntime
    lines = [f'"""ONNX Runtime {onnxruntime.__version__}\'s schemas of the com.microsoft ops we run '
             "(inputs and outputs as [name, type parameter, option], type constraints, attribute "
             'types): written by tests/support/record_contrib_schemas.py, do not edit."""', "",
             "SCHEMAS = {"]
    lines += [f"    {name!r}: {json.dumps(entry)}," for name, entry in sorted(table.items())]
    lines += ["}", "", "# ONNX Runtime's own ops in the default domain, which onnx does not define",
              "DEFAULT_DOMAIN = {"]
    lines += [f"    {name!r}: {json.dumps(entry)}," for name, entry in sorted(own.items())]
    OUT.write_text("\n".join(lines + ["}", ""]))
    print(f"{len(table)} of {len(ours)} ops, {len(own)} of {len(default)} default-domain -> {OUT}")


if __name__ == "__main__":
    main()
