"""Test configuration: float64 everywhere (tests that check float32 cast explicitly), a
deterministic hypothesis profile, the fast/full switch for long-horizon tests, and the opt-in
XLA:CPU loop setting.

The suite opts in to geomjax's small-loop setting (``GEOMJAX_XLA_FLAGS=1``, read at ``import
geomjax``, before any computation; ``geomjax._internal.xla_flags``), as it ran when the setting
was applied at import: without it the simulation-heavy tests run slower (measured, loaded 2-core
CPU: ``test_restart.py`` and ``test_rigid_body.py`` 66 s opted in, 97 s without) and the
default tier must stay under its time budget.  ``GEOMJAX_XLA_FLAGS=0 make test`` runs the suite
with geomjax's defaults (XLA's own threshold); ``tests/test_xla_flags.py`` checks the defaults
in fresh processes either way."""

import os

# before geomjax is imported anywhere (test modules are imported after this file)
os.environ.setdefault("GEOMJAX_XLA_FLAGS", "1")

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "geomjax",
    deadline=None,
    max_examples=20,
    derandomize=True,  # CI must be reproducible
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "thorough", parent=settings.get_profile("geomjax"), max_examples=300, derandomize=False
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "geomjax"))

#: GEOMJAX_FULL=1 runs the long-horizon tests at the sizes quoted in the issues.
FULL = os.environ.get("GEOMJAX_FULL", "0") == "1"


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Release each test module's compiled programs when it ends.  A long-lived xdist worker of
    the long tier otherwise keeps every executable of every module it ran (5 GB resident seen),
    and there XLA:CPU's JIT linker once failed ("Failed to materialize symbols") and then
    crashed the worker.  Programs are rarely shared across modules, so little is recompiled."""
    yield
    jax.clear_caches()


@pytest.fixture(scope="session")
def host_devices(tmp_path_factory, request):
    """``run(script)``: :func:`host_devices.run_on_host_devices` run once per test session,
    its result shared by the pytest-xdist workers through the session's temporary folder (a
    module's fixture that runs such a script is otherwise set up once on each worker its tests
    land on)."""
    from host_devices import run_on_host_devices

    share = tmp_path_factory.getbasetemp()
    # an xdist worker (config.workerinput) has its own folder under the session's; without
    # xdist the session's folder is the one
    if hasattr(request.config, "workerinput"):
        share = share.parent
    return lambda script, **kwargs: run_on_host_devices(script, share=share, **kwargs)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(params=["float64", "float32"])
def dtype(request):
    return np.dtype(request.param)


# The longest tests (subprocesses: the demo, the notebooks, the README) first: the worksteal
# scheduler hands out the short ones at the end, so no worker is left alone finishing a
# 90-second test while the other idles.
_LONG_FIRST = ("test_cli.py::test_demo", "test_notebooks.py::test_notebook_runs", "test_readme.py")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: not any(k in item.nodeid for k in _LONG_FIRST))
    if FULL:
        return
    # The long tier: end-to-end runs and the checks that compile for many seconds (the demo,
    # the notebooks in their default mode, solver and gradient programs of ~10 s and more on a
    # 2-core CPU). `make test-full` (GEOMJAX_FULL=1) runs them, and CI runs it after `make test`,
    # which keeps a few minutes.
    skip = pytest.mark.skip(reason="long tier: make test-full (GEOMJAX_FULL=1) runs it")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)
