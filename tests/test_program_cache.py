"""``geomjax._internal.program_cache``: the per-signature tables evict as ``functools.lru_cache``
does (``evict="lru"``), oldest first or all at once; ``clear_all`` empties every table, and the
next call of a signature then traces its program again (eager tier, scalar programs, programs
compiled ahead of time)."""

import functools

import jax
import jax.monitoring
import jax.numpy as jnp
import numpy as np
import pytest

from geomjax._internal import program_cache
from geomjax._internal.aot import CompiledPrograms
from geomjax._internal.eager import HOST_CALLS, quick_compiled
from geomjax._internal.program_cache import ProgramCache
from geomjax._internal.scalarize import scalarize
from tests.jax_events import TRACE, count_events


def test_lru_eviction_misses_where_functools_lru_cache_misses():
    rng = np.random.default_rng(7)
    keys = [int(k) for k in rng.integers(0, 6, size=300)]
    reference_misses = []

    @functools.lru_cache(maxsize=3)
    def reference(k):
        reference_misses.append(k)
        return k * k

    table, misses = ProgramCache("test lru", maxsize=3, evict="lru"), []
    for k in keys:
        assert reference(k) == k * k
        if table.get(k) is None:
            misses.append(k)
            table.put(k, k * k)
        assert len(table) <= 3
    assert misses == reference_misses and 10 < len(misses) < len(keys)


def test_oldest_and_all_evictions():
    oldest = ProgramCache("test oldest", maxsize=2)
    for k in "abc":
        oldest.put(k, k.upper())
    assert oldest.get("a") is None and oldest.get("b") == "B" and oldest.get("c") == "C"
    oldest.get("b")  # a read does not keep an entry: the oldest goes first
    oldest.put("d", "D")
    assert "b" not in oldest and "c" in oldest and "d" in oldest
    oldest.put("c", "C2")  # a key already kept: nothing dropped
    assert len(oldest) == 2 and oldest.get("c") == "C2"
    everything = ProgramCache("test all", maxsize=2, evict="all")
    for k in "abc":
        everything.put(k, k)
    assert len(everything) == 1 and "c" in everything
    with pytest.raises(TypeError):
        everything.get(["unhashable"])
    with pytest.raises(ValueError, match="argument 'evict'"):
        ProgramCache("bad", evict="random")
    with pytest.raises(ValueError, match="argument 'maxsize'"):
        ProgramCache("bad", maxsize=0)


def _traced_once(x, y):
    """Module-level (its scalar program is cached): counts its traces."""
    _TRACED.append(1)
    return jnp.sin(x) * y + x**2


_TRACED = []


def test_clear_all_empties_every_table_and_the_next_call_traces_again():
    f = quick_compiled(lambda a: jnp.tanh(a) * 2.0 + 1.0)
    x = jnp.array([0.25, -0.5, 1.5, 0.125, 3.0])  # a shape no other test of f uses: fresh counts
    for _ in range(HOST_CALLS + 1):  # host evaluations, then the compiled program
        f(x)
    _, traces = count_events(lambda: f(x), TRACE)
    assert traces == 0  # compiled and dispatched: nothing traced

    y = jnp.array([0.5, 2.0])
    _TRACED.clear()
    for _ in range(2):  # a new jit each time: only the scalar-program cache can skip the trace
        jax.jit(lambda a, b: scalarize(_traced_once)(a, b))(y, y)
    assert len(_TRACED) == 1

    programs = CompiledPrograms(lambda w, a: jnp.cos(a) * w)
    programs.prepare((jnp.array(2.0),))
    spec = jax.ShapeDtypeStruct((3,), jnp.float64)
    count_events(lambda: programs.program("sig", spec)(programs.leaves, jnp.ones(3)), TRACE)
    _, traces = count_events(
        lambda: programs.program("sig", spec)(programs.leaves, jnp.ones(3)), TRACE
    )
    assert traces == 0 and len(programs.compiled) == 1

    assert any(len(t) for t in program_cache.tables())
    program_cache.clear_all()
    assert all(len(t) == 0 for t in program_cache.tables())

    out, traces = count_events(lambda: f(x), TRACE)  # the host tier again: its jaxpr traced again
    assert traces >= 1
    np.testing.assert_allclose(out, np.tanh(np.asarray(x)) * 2.0 + 1.0, rtol=1e-15)
    jax.jit(lambda a, b: scalarize(_traced_once)(a, b))(y, y)
    assert len(_TRACED) == 2  # the scalar program was built again
    out, traces = count_events(
        lambda: programs.program("sig", spec)(programs.leaves, jnp.ones(3)), TRACE
    )
    assert traces >= 1 and len(programs.compiled) == 1
    np.testing.assert_allclose(out, 2.0 * np.cos(np.ones(3)), rtol=1e-15)
