"""The benchmark scripts are not run by the suite (speed is measured in ``benchmarks/``, never
asserted here), but they must stay importable against the current API, and their shared helpers
must work."""

import importlib
import json
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(p.stem for p in BENCH.glob("bench_*.py"))


@pytest.fixture(autouse=True)
def _bench_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))


@pytest.mark.parametrize("name", SCRIPTS)
def test_benchmark_imports_and_has_main(name):
    module = importlib.import_module(name)
    assert callable(module.main)


def test_common_helpers(tmp_path, monkeypatch, capsys):
    import matplotlib

    matplotlib.use("Agg")
    import jax.numpy as jnp
    import matplotlib.pyplot as plt

    common = importlib.import_module("common")
    # timing: compile and run reported separately, both positive
    c, r = common.time_jitted(lambda x: jnp.sin(x) @ x, jnp.ones((4, 4)), repeats=2, min_time=0.01)
    assert c > 0 and r > 0
    common.print_table([{"a": 1.23456, "b": None}], ["a", "b"], title="t")
    out = capsys.readouterr().out
    assert "1.23" in out and "-" in out
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    png = common.save_figure(fig, tmp_path / "f.png")
    assert png.stat().st_size > 0
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    path = common.write_json("x", {"v": 1.0})
    assert json.loads(path.read_text())["v"] == 1.0
    monkeypatch.delenv("GEOMJAX_FAST", raising=False)
    assert common.fast_mode(["--fast"]) and not common.fast_mode([])


@pytest.mark.long  # ~6-8 s of compilation: the long tier (make test-full)
def test_machine_info_and_bandwidth_helpers(monkeypatch):
    # every benchmark JSON says where it ran: backend, devices, precision, versions
    import jax
    import jax.numpy as jnp

    common = importlib.import_module("common")
    info = common.machine_info()
    assert info["backend"] == jax.default_backend() and info["jax"] == jax.__version__
    assert info["device_count"] == jax.device_count() and "jax_enable_x64" in info
    assert common.measure_copy_bandwidth(1 << 16) > 0
    assert common.peak_bandwidth_gbs(type("D", (), {"device_kind": "NVIDIA H100 PCIe"})) == 2000.0
    assert common.peak_bandwidth_gbs(type("D", (), {"device_kind": "NVIDIA H200"})) == 4800.0
    assert common.peak_bandwidth_gbs(type("D", (), {"device_kind": "cpu"})) is None
    # the reverse pass of a cumulative product stores its intermediates: scratch grows with n
    f = lambda x: jax.grad(lambda x: jnp.sum(jnp.cumprod(jnp.sin(x))))(x)  # noqa: E731
    small, large = (common.compiled_memory(f, jnp.ones(n))["temp_MB"] for n in (1000, 100_000))
    assert large > 10 * small
    from geomjax.cli import BENCHMARK_ALIASES, BENCHMARKS

    assert BENCHMARK_ALIASES["gpu"] in BENCHMARKS


def test_bench_variational_baselines():
    """The baselines of bench_variational solve the right problem: the index-1 acceleration
    satisfies the twice-differentiated constraint and the projection lands on g = 0, G q̇ = 0."""
    import jax
    import jax.numpy as jnp

    bv = importlib.import_module("bench_variational")
    st = bv.cartesian_state()
    assert float(jnp.max(jnp.abs(bv.constraint(st.q)))) < 1e-14
    y = jnp.concatenate([st.q, jnp.array([0.3, 0.1, -0.2, 0.5])])
    y = bv.project(y)  # velocity onto G q̇ = 0 (q already on the constraint)
    q, v = y[:4], y[4:]
    G = jax.jacfwd(bv.constraint)(q)
    assert float(jnp.max(jnp.abs(G @ v))) < 1e-14
    a = bv.index1_rhs(y)[4:]
    curv = jax.jvp(lambda x: jax.jvp(bv.constraint, (x,), (v,))[1], (q,), (v,))[1]
    assert float(jnp.max(jnp.abs(G @ a + curv))) < 1e-12


def test_harness_measure_separates_compile_and_picks_the_median():
    import jax
    import jax.numpy as jnp

    common = importlib.import_module("common")

    @jax.jit
    def f(x):
        return jnp.sin(x) @ x

    # a real jitted function: the bookkeeping only (no assertion on which call was faster:
    # speed is measured in the benchmarks, the estimator is checked on a fake clock below)
    t = common.measure(f, jnp.ones((8, 8)), repeats=3)
    assert len(t.samples) == 3 and t.calls == 1 and t.first_s > 0
    assert t.run_s == sorted(t.samples)[1]
    assert t.compile_s == pytest.approx(max(t.first_s - t.run_s, 0.0))
    np.testing.assert_allclose(t.out, jnp.sin(jnp.ones((8, 8))) @ jnp.ones((8, 8)))

    # a fake clock: call k of fn lasts durations[k] (the first call is the warm-up)
    durations = iter([5.0, 3.0, 1.0, 2.0, 9.0, 4.0])
    now = [0.0]

    def fn():
        now[0] += next(durations)

    t = common.measure(fn, repeats=5, clock=lambda: now[0])
    assert t.first_s == 5.0 and t.samples == (3.0, 1.0, 2.0, 9.0, 4.0)
    assert t.run_s == 3.0  # the median, not the minimum 1.0 nor the mean 3.8
    assert t.compile_s == 2.0

    durations = iter([5.0, 3.0, 1.0])
    t = common.measure(fn, repeats=3, warmup=False, clock=lambda: now[0])
    assert t.samples == (5.0, 3.0, 1.0) and t.run_s == 3.0

    # side by side: interleaved rounds, a median per function
    durations = iter([1.0, 10.0, 2.0, 20.0, 4.0, 40.0, 3.0, 30.0])
    res = common.measure_side_by_side({"a": fn, "b": fn}, rounds=3, clock=lambda: now[0])
    assert res["a"].samples == (2.0, 4.0, 3.0) and res["a"].run_s == 3.0
    assert res["b"].first_s == 10.0 and res["b"].run_s == 30.0


def test_harness_timer_and_time_jitted():
    import jax.numpy as jnp

    common = importlib.import_module("common")
    now = [0.0]
    with common.timer(lambda: now[0]) as t:
        now[0] += 2.0
        assert t.lap() == 2.0 and t.elapsed == 2.0
        now[0] += 1.5
    now[0] += 100.0
    assert t.s == 3.5 and t.elapsed == 3.5  # frozen at the end of the block
    assert common.median([4.0, 1.0, 2.0]) == 2.0
    c, r = common.time_jitted(lambda x: jnp.sin(x) @ x, jnp.ones((4, 4)), repeats=2, min_time=0.01)
    assert c > 0 and r > 0


def test_harness_fresh_process_round_trips_json(tmp_path):
    common = importlib.import_module("common")
    child = tmp_path / "child.py"
    child.write_text(
        "import json, os, sys\n"
        "print('noise first')\n"
        "print(json.dumps({'args': sys.argv[1:], 'v': os.environ.get('HARNESS_V'),\n"
        "                  'gone': 'HARNESS_GONE' in os.environ}))\n"
    )
    out = common.fresh_process(
        child, ["--x", 3], env={"HARNESS_V": "7", "HARNESS_GONE": None}, timeout=60
    )
    assert out == {"args": ["--x", "3"], "v": "7", "gone": False}
    assert common.fresh_process(code="print(1 + 1)") == 2
    with pytest.raises(RuntimeError, match="boom"):
        common.fresh_process(code="raise SystemExit('boom')")


#: ``time.perf_counter`` is read by the harness in ``benchmarks/common.py`` (``measure``,
#: ``measure_side_by_side``, ``compile_timed``, ``timer``) and nowhere else, except the child
#: programs of ``bench_latency.py`` (source strings run in bare interpreters: they time cold
#: starts, ``import jax`` included, so they import nothing of the harness).  These counts may
#: only go down.
PERF_COUNTER_ALLOWED = {"common.py": None}
PERF_COUNTER_LEFT = {"bench_latency.py": 15}


def test_benchmarks_time_through_the_harness():
    counts = {
        p.name: p.read_text().count("perf_counter")
        for p in sorted(BENCH.glob("*.py"))
        if p.name not in PERF_COUNTER_ALLOWED
    }
    over = {k: v for k, v in counts.items() if v > PERF_COUNTER_LEFT.get(k, 0)}
    assert not over, f"time through benchmarks/common.py's harness instead: {over}"
