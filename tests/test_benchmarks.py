"""The benchmark scripts are not run by the suite (speed is measured in ``benchmarks/``, never
asserted here), but they must stay importable against the current API, and their shared helpers
must work."""

import importlib
import json
from pathlib import Path

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
