"""JAX's persistent compilation cache (src/backends/compile_cache.py), in fresh processes: what one process
compiles, the next reads back; off writes nothing; the user's own JAX settings win.

Each case runs CHILD in a new interpreter (the cache is per process, set at the first compile).
Hits and misses are JAX's own monitoring events; entries are the files in the folder. Every
compiled output is also compared with onnxruntime's recorded output (tests/fixtures/<name>/
references/model.npz), so an executable read back from the cache computes what a fresh compile
computes. The default suite runs with TRANSMUTER_COMPILE_CACHE=0 (tests/conftest.py); here each
child gets its own temp folder."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

import transmuter
from transmuter.backends import compile_cache
from transmuter.errors import InputError

ROOT = pathlib.Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, warnings
import numpy as np
before = {"dir": None}
import transmuter, jax
from jax._src import monitoring
from tests import fixtures
before["dir"] = jax.config.jax_compilation_cache_dir  # import alone must not turn it on
events = []
monitoring.register_event_listener(lambda e, **_: events.append(e.rsplit("/", 1)[-1]))
jobs, report = json.loads(sys.argv[1]), []
for job in jobs:
    del events[:]
    (inputs, expected), = fixtures.steps(job["fixture"], "references/model.npz")
    model = transmuter.load(f"tests/fixtures/{job['fixture']}/onnx/model.onnx",
                            backend=job.get("backend", "jax"), compile_cache=job.get("option"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = transmuter.compile(model, inputs)(inputs)  # the second call runs what compiled
    for name, want in expected.items():  # fp32 sums in another order than onnxruntime: 1e-4
        np.testing.assert_allclose(np.asarray(out[name]), want, rtol=0, atol=1e-4)
    report.append({"hits": events.count("cache_hits"), "misses": events.count("cache_misses"),
                   "warnings": [str(w.message) for w in caught]})
config = {k: getattr(jax.config, k) for k in ("jax_compilation_cache_dir",
          "jax_compilation_cache_max_size", "jax_persistent_cache_min_compile_time_secs")}
print(json.dumps({"before": before, "jobs": report, "config": config}))
"""


def run_child(jobs, tmp_path, cache, **env):
    """Run CHILD on ``jobs`` with TRANSMUTER_COMPILE_CACHE=``cache`` (None: unset) and a HOME /
    XDG_CACHE_HOME inside ``tmp_path``; JAX's threshold at 0 s unless ``env`` says otherwise, so
    the tiny fixtures' compiles (which may take under our 0.1 s) are written."""
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE",
                                    "TRANSMUTER_COMPILE_CACHE"))}
    environ.update(JAX_PLATFORMS="cpu", HOME=str(tmp_path / "home"),
                   XDG_CACHE_HOME=str(tmp_path / "xdg"),
                   JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    if cache is not None:
        environ["TRANSMUTER_COMPILE_CACHE"] = str(cache)
    environ.update({k: str(v) for k, v in env.items() if v is not None})
    for k, v in env.items():
        if v is None:
            environ.pop(k, None)
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(jobs)], cwd=ROOT,
                          env=environ, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def segments(folder):
    """The compiled graph segments stored in ``folder`` (the runner's jitted function is
    ``segment``; JAX names an entry after it), as sorted file names."""
    return sorted(p.name for p in pathlib.Path(folder).glob("jit_segment-*-cache"))


def test_second_process_reads_back_what_the_first_compiled(tmp_path):
    folder = tmp_path / "cache"
    first = run_child([{"fixture": "bert"}], tmp_path, folder)
    written = segments(folder)
    assert first["before"]["dir"] is None  # lazily: not at import
    assert first["config"]["jax_compilation_cache_dir"] == str(folder)
    assert first["jobs"][0]["misses"] >= 1 and first["jobs"][0]["hits"] == 0 and written
    second = run_child([{"fixture": "bert"}], tmp_path, folder)
    assert second["jobs"][0]["hits"] >= 1 and second["jobs"][0]["misses"] == 0
    assert segments(folder) == written
    # bert-opset14 is the bert fixture exported at another opset: same inputs and shapes, a
    # different graph; it compiles its own entry, never reads bert's
    other = run_child([{"fixture": "bert-opset14"}], tmp_path, folder)
    assert other["jobs"][0]["misses"] >= 1
    assert len(segments(folder)) == len(written) + 1 and set(written) < set(segments(folder))


def test_default_folder_bound_and_threshold(tmp_path):
    """No setting anywhere: $XDG_CACHE_HOME/transmuter/jax, our size bound (JAX keeps access
    times beside each entry for its LRU eviction) and our minimum compile time."""
    out = run_child([{"fixture": "bert"}], tmp_path, None,
                    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=None)
    folder = tmp_path / "xdg" / "transmuter" / "jax"
    assert out["config"] == {"jax_compilation_cache_dir": str(folder),
                             "jax_compilation_cache_max_size": compile_cache.MAX_BYTES,
                             "jax_persistent_cache_min_compile_time_secs":
                                 compile_cache.MIN_COMPILE_SECS}
    assert folder.is_dir()
    for entry in folder.glob("*-cache"):
        assert entry.with_name(entry.name[:-len("cache")] + "atime").exists()


def test_environment_values(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(compile_cache.ENV, raising=False)
    assert compile_cache.folder_for() == str(tmp_path / "transmuter" / "jax")
    for off in ("0", "off", "OFF", "false", "no", ""):
        monkeypatch.setenv(compile_cache.ENV, off)
        assert compile_cache.folder_for() is None and compile_cache.folder_for(True) is None
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path / "moved"))
    assert compile_cache.folder_for(None) == str(tmp_path / "moved")
    assert compile_cache.folder_for(tmp_path / "mine") == str(tmp_path / "mine")
    assert compile_cache.folder_for(False) is None


def test_off_writes_nothing(tmp_path):
    out = run_child([{"fixture": "bert"}], tmp_path, "off")
    assert out["config"]["jax_compilation_cache_dir"] is None
    assert not (tmp_path / "xdg" / "transmuter").exists()


def test_option_false_writes_nothing_even_when_the_cache_is_on(tmp_path):
    """bert-opset14 with compile_cache=False before the cache is on, then bert turns it on,
    then bert-opset14 with compile_cache=False again (a new model: it compiles again)."""
    folder = tmp_path / "cache"
    jobs = [{"fixture": "bert-opset14", "option": False}, {"fixture": "bert"},
            {"fixture": "bert-opset14", "option": False}]
    out = run_child(jobs, tmp_path, folder)
    assert out["config"]["jax_compilation_cache_dir"] == str(folder)
    assert len(segments(folder)) == 1  # bert's


def test_option_folder_and_a_late_conflicting_one(tmp_path):
    mine, late = tmp_path / "mine", tmp_path / "late"
    out = run_child([{"fixture": "bert", "option": str(mine)},
                     {"fixture": "bert-opset14", "option": str(late)}], tmp_path, "0")
    assert out["config"]["jax_compilation_cache_dir"] == str(mine)
    assert len(segments(mine)) == 2 and not late.exists()
    assert "is not used" in " ".join(out["jobs"][1]["warnings"])


def test_user_jax_setting_wins(tmp_path):
    """JAX_COMPILATION_CACHE_DIR set by the user: their folder and their (unbounded) size."""
    theirs, ours = tmp_path / "theirs", tmp_path / "ours"
    out = run_child([{"fixture": "bert"}], tmp_path, ours, JAX_COMPILATION_CACHE_DIR=theirs)
    assert out["config"]["jax_compilation_cache_dir"] == str(theirs)
    assert out["config"]["jax_compilation_cache_max_size"] == -1
    assert segments(theirs) and not ours.exists()


def test_user_jax_off_wins(tmp_path):
    out = run_child([{"fixture": "bert"}], tmp_path, tmp_path / "ours",
                    JAX_ENABLE_COMPILATION_CACHE="false")
    assert out["config"]["jax_compilation_cache_dir"] is None
    assert not (tmp_path / "ours").exists()


def test_size_bound_evicts_least_recently_used(tmp_path):
    """A bound of one segment entry (a user's jax_compilation_cache_max_size, kept): writing
    bert-opset14's segment evicts bert's."""
    folder = tmp_path / "cache"
    run_child([{"fixture": "bert"}], tmp_path, folder)
    (first,) = segments(folder)
    size = (folder / first).stat().st_size
    small = int(size * 1.9)  # room for one segment of either graph (sizes within 10%)
    for path in folder.glob("*-cache"):  # leave only bert's segment under the bound
        if path.name != first:
            path.unlink()
    out = run_child([{"fixture": "bert-opset14"}], tmp_path, folder,
                    JAX_COMPILATION_CACHE_MAX_SIZE=small)
    assert out["config"]["jax_compilation_cache_max_size"] == small
    assert first not in segments(folder) and len(segments(folder)) == 1


def test_xla_options_are_part_of_the_key(tmp_path):
    """backends/jax.py passes XLA options per compiled function (_CPU_OPTIONS): the same function
    compiled with the other option set must not read the first one's executable."""
    script = r"""
import json, sys
import numpy as np
from jax._src import monitoring
from transmuter.backends import jax as backend
events = []
monitoring.register_event_listener(lambda e, **_: events.append(e.rsplit("/", 1)[-1]))
def product(x):
    return (x @ x.T).sum(axis=0)
for dots in (False, True):
    with backend.BACKEND.persistent_cache(None):
        backend.BACKEND.compile(product, library_dots=dots)(np.ones((8, 8), np.float32))
print(json.dumps({"options": [backend._compiler_options(d) for d in (False, True)],
                  "hits": events.count("cache_hits"), "misses": events.count("cache_misses")}))
"""
    environ = dict(os.environ, JAX_PLATFORMS="cpu", TRANSMUTER_COMPILE_CACHE=str(tmp_path),
                   JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=environ,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if out["options"][0] is None or out["options"][0] == out["options"][1]:
        pytest.skip("this jaxlib takes no per-function CPU options")
    assert out["hits"] == 0 and len(list(tmp_path.glob("jit_product-*-cache"))) == 2


def test_mlx_has_no_persistent_cache(tmp_path):
    pytest.importorskip("mlx.core")
    folder = tmp_path / "cache"
    run_child([{"fixture": "bert", "backend": "mlx"}], tmp_path, folder)
    assert not segments(folder)


def test_bad_option_is_refused():
    path = ROOT / "tests" / "fixtures" / "bert" / "onnx" / "model.onnx"
    with pytest.raises(InputError, match="compile_cache"):
        transmuter.load(path, compile_cache=3)
    with pytest.raises(InputError, match="compile_cache"):
        transmuter.compile(transmuter.load(path), {}, compile_cache=["folder"])


def test_unwritable_folder_warns_and_compiles_uncached(tmp_path):
    import jax

    if jax.config.jax_compilation_cache_dir is not None:
        pytest.skip("JAX's cache is already on in this process")
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the folder's parent should be
    with pytest.warns(UserWarning, match="Cannot create the compilation cache folder"):
        with compile_cache.scope(blocked / "jax"):
            pass
    assert jax.config.jax_compilation_cache_dir is None
