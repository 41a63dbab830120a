"""The layout of src/ (docs/architecture.md): folders are layers, each importing only the layers
below it, and no module takes part in an import loop. Every import counts, those inside
functions too. And every module imports cleanly as the first import of a fresh interpreter.

The checker itself is tested on small made-up trees: one with a loop and one with an upward
import must fail, so a green run means the real tree has neither."""

import ast
import pathlib
import subprocess
import sys

SRC = pathlib.Path(__file__).resolve().parent.parent / "src"

# Bottom up. A top-level module (errors.py) or folder (engine/) is a layer; "__init__" is the
# package's face (it re-exports the public API from every layer) and "cli" the command line.
LAYERS = [
    ("errors", "options", "dtypes", "buckets"),
    ("kernels",),
    ("backends",),
    ("ops",),
    ("engine",),
    ("hub",),
    ("debug",),
    ("preprocess",),
    ("generation",),
    ("serving",),
    ("pipelines",),
    ("training",),
    ("integrations",),
    ("coverage",),
    ("cli",),
    ("__init__",),
]
LEVEL = {name: i for i, names in enumerate(LAYERS) for name in names}


def modules(root):
    """{dotted name: path} of every module under ``root`` (the package ``transmuter``)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(("transmuter",) + parts)] = path
    return found


def imports(name, path, known):
    """The modules of ``known`` that module ``name`` imports, with the line of each: relative
    and absolute imports, at the top of the file or inside a function."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                target = f"{base}.{alias.name}"
                target = target if target in known else base
                if target in known:
                    found.append((target, node.lineno))
        elif isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names if a.name in known]
    return found


def layer(name):
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def problems(root):
    """Upward imports and import loops of the tree at ``root``, as readable lines."""
    known = modules(root)
    graph = {name: imports(name, path, known) for name, path in known.items()}
    found = []
    for name, targets in graph.items():
        if layer(name) not in LEVEL:
            found.append(f"{name}: its layer {layer(name)!r} is not in tests/test_layers.LAYERS")
            continue
        for target, line in targets:
            if LEVEL.get(layer(target), -1) > LEVEL[layer(name)]:
                found.append(f"{known[name].relative_to(root)}:{line} imports {target}, a layer "
                             f"above its own ({layer(target)} > {layer(name)})")
    found += [f"import loop: {' -> '.join(loop)}" for loop in loops(graph)]
    return found


def loops(graph):
    """The strongly connected components of more than one module (Tarjan), and self-imports."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w, _ in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or any(w == v for w, _ in graph.get(v, ())):
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_upward_import_and_no_loop():
    assert len(modules(SRC)) > 150  # the whole package is read, not an empty folder
    assert problems(SRC) == []


def _tree(tmp_path, files):
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_the_checker_finds_a_loop(tmp_path):
    root = _tree(tmp_path, {
        "__init__.py": "",
        "engine/__init__.py": "",
        "engine/model.py": "from .compiled import compile\n",
        "engine/compiled.py": "def f():\n    from .model import Model\n",  # inside a function
    })
    assert problems(root) == [
        "import loop: transmuter.engine.compiled -> transmuter.engine.model"]


def test_the_checker_finds_an_upward_import(tmp_path):
    root = _tree(tmp_path, {
        "__init__.py": "",
        "generation/__init__.py": "",
        "generation/rows.py": "def f():\n    from ..pipelines.base import Pipeline\n",
        "pipelines/__init__.py": "",
        "pipelines/base.py": "from transmuter.generation import config\n",  # downward: fine
        "generation/config.py": "",
    })
    assert problems(root) == ["generation/rows.py:2 imports transmuter.pipelines.base, a layer "
                              "above its own (pipelines > generation)"]


# Run in a new interpreter: it imports the third-party libraries once (jax takes seconds), then
# forks a child per module that imports that module before any other of transmuter's.
_FIRST_IMPORTS = """
import importlib, os, sys
for lib in ("numpy", "onnx", "jax", "jax.numpy", "PIL.Image", "tokenizers", "jinja2"):
    importlib.import_module(lib)
assert not any(m.startswith("transmuter") for m in sys.modules)
failed = 0
for name in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:
        try:
            importlib.import_module(name)
        except BaseException as e:
            print(f"{name}: {type(e).__name__}: {e}", flush=True)
            os._exit(1)
        os._exit(0)
    failed += os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0
sys.exit(1 if failed else 0)
"""


def test_every_module_imports_first_in_a_fresh_interpreter():
    """Each module as the first transmuter import of a process: a loop that only the import order
    of the package's __init__ hides fails here (it printed which module and why)."""
    names = sorted(modules(SRC))
    assert len(names) > 150, names  # the whole package is found, not an empty folder
    run = subprocess.run([sys.executable, "-c", _FIRST_IMPORTS, *names], capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
