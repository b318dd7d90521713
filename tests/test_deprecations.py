"""Every former name in the changelog's table of deprecated names still works: for each row, the
old name (an attribute ``Owner.old``, a module's attribute ``module.old`` with the row's module
as the owner, or a keyword ``function(old=)``) warns with a
``DeprecationWarning`` that names its replacement and gives what the new name gives."""

import importlib
import re
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj

CHANGELOG = Path(__file__).resolve().parents[1] / "docs" / "changelog.md"
HEADER = ("Deprecated", "Replacement", "Module", "Since")
CODE = re.compile(r"^`([^`]+)`$")


def deprecation_table(text: str) -> list[dict[str, str]]:
    """The rows of the markdown table whose header is :data:`HEADER` (cells in backticks are
    unquoted)."""
    lines = text.splitlines()
    start = next(
        i
        for i, line in enumerate(lines)
        if tuple(c.strip() for c in line.strip().strip("|").split("|")) == HEADER
    )
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        cells = [m.group(1) if (m := CODE.match(c)) else c for c in cells]
        rows.append(dict(zip(HEADER, cells, strict=True)))
    return rows


ROWS = deprecation_table(CHANGELOG.read_text())
ATTRIBUTE = re.compile(r"^([\w.]+)\.(\w+)$")  # Owner.name (Owner may be dotted: OnlineMPC.init)
KEYWORD = re.compile(r"^([\w.]+)\((\w+)=\)$")  # function(name=)


def parse(name: str):
    """``("attribute", owner, attr)`` or ``("keyword", function, keyword)``."""
    if m := KEYWORD.match(name):
        return "keyword", m.group(1), m.group(2)
    m = ATTRIBUTE.match(name)
    assert m, f"not an attribute or keyword form: {name!r}"
    return "attribute", m.group(1), m.group(2)


# --- what each owner needs: an instance (attributes), a call (keywords) ---------------------------
def _rigid_body():
    return gj.RigidBody(jnp.array([1.0, 2.0, 3.0])), gj.RigidBodyState(jnp.eye(3), jnp.zeros(3))


def _problem():
    from geomjax.control.trajopt import OptimalControlProblem

    body, x0 = _rigid_body()
    return OptimalControlProblem(
        body, gj.RKMK4(), x0, 0.1, 5, lambda t, x, u: jnp.sum(u**2), control_dim=3
    )


def _arange(*shape):
    return jnp.arange(float(np.prod(shape))).reshape(shape)


def _ocp_solution():
    from geomjax.control.trajopt import OCPSolution

    return OCPSolution(
        times=_arange(3), states=_arange(3, 2) + 1, controls=_arange(2, 1) + 2, K=_arange(2, 1, 2),
        k=_arange(2, 1), cost=jnp.array(1.5), violation=jnp.array(0.0), status=jnp.array(1),
        iterations=jnp.array(4), history={}, duals=None,
    )  # fmt: skip


def _mpc_result():
    from geomjax.control.mpc import MPCResult

    return MPCResult(
        times=_arange(3), states=_arange(3, 2), controls=_arange(2, 1), error=_arange(2),
        status=jnp.array([0, 1]), cost=_arange(2), iterations=jnp.array([3, 4]), plan=_arange(2, 2, 1),
    )  # fmt: skip


def _optimize_result():
    from geomjax.control.optimize import OptimizeResult

    return OptimizeResult(jnp.ones(2), 0.5, {}, 7, "max_iters", 0.0)


def _solution():
    return gj.Solution(times=_arange(3), states=_arange(3, 2), stats={})


def _recording():
    return gj.learn.Recording(times=_arange(3), g=jnp.stack([jnp.eye(3)] * 3))


def _mpc():
    return gj.control.MPC(gj.control.ILQR(), max_iters=2)


def _fit_neural_ode(kw):
    # no training iteration (the value is 0): the call builds the segments and returns the
    # untrained model, its first state and an empty loss history — no compilation
    from geomjax.learn import NeuralODE, fit_neural_ode

    R = jnp.stack([jnp.eye(3)] * 11)
    res = fit_neural_ode(NeuralODE(9, 3, jax.random.PRNGKey(0), width=4), R, 0.1, **{kw: 0})
    return (*res, res.iterations, res.stop_reason)  # its unpacked fields and its status


def _fit_result():
    from geomjax.learn import FitResult
    from geomjax.results import Status

    return FitResult(
        system=None, values=(), std=(), covariance=np.zeros((0, 0)), names=(), initial_states=[],
        sigma=1.0, cost=0.5, converged=True, rank_ratio=1.0, status=Status.CONVERGED,
        message="converged", iterations=9,
    )  # fmt: skip


def _pendulum_model():
    from geomjax.learn import NeuralPotential

    return gj.RigidBody(
        jnp.array([1.0, 2.0, 3.0]), potential=NeuralPotential(gj.SO3, jax.random.PRNGKey(0), 4, 1)
    )


INSTANCES = {
    ("geomjax.learn", "FitResult"): _fit_result,
    ("geomjax.control", "MPC"): _mpc,
    ("geomjax.control.trajopt", "OCPSolution"): _ocp_solution,
    ("geomjax.control", "MPCResult"): _mpc_result,
    ("geomjax.control", "OptimizeResult"): _optimize_result,
    ("geomjax", "Solution"): _solution,
    ("geomjax.learn", "Recording"): _recording,
}


def _outcome(call):
    """What a call gives: its value, or the message of the ``ValueError`` it raises (an input
    check, reached without compiling a solve)."""
    try:
        return call()
    except ValueError as e:
        return f"ValueError: {e}"


def _run_mpc(**kw):
    from geomjax.control import run_mpc

    return _outcome(lambda: run_mpc(_problem(), steps=3, **kw))


#: (function, keyword) -> a call of the function with that keyword set to a value
CALLS = {
    ("Solution", "ts"): lambda kw: gj.Solution(states=_arange(3, 2), **{kw: _arange(3)}),
    ("Recording", "ts"): lambda kw: gj.learn.Recording(
        g=jnp.stack([jnp.eye(3)] * 3), **{kw: _arange(3)}
    ),
    # shapes that the input checks reject: the message shows the value reached them
    ("solve_ocp", "us"): lambda kw: _outcome(
        lambda: gj.control.solve_ocp(_problem(), gj.control.ILQR(), **{kw: jnp.zeros((4, 3))})
    ),
    ("solve_ocp", "xs"): lambda kw: _outcome(
        lambda: gj.control.solve_ocp(_problem(), gj.control.ILQR(), **{kw: jnp.zeros(3)})
    ),
    ("solve_ocp_implicit", "us"): lambda kw: _outcome(
        lambda: gj.control.solve_ocp_implicit(
            _problem(), gj.control.ILQR(), **{kw: jnp.zeros((4, 3))}
        )
    ),
    ("run_mpc", "us"): lambda kw: _run_mpc(**{kw: jnp.zeros((4, 3))}),
    ("run_mpc", "x0"): lambda kw: _run_mpc(**{kw: gj.RigidBodyState(jnp.eye(3), jnp.zeros(4))}),
    ("OnlineMPC.init", "us"): lambda kw: gj.control.OnlineMPC(_problem()).init(
        **{kw: _arange(5, 3)}
    ),
    ("MPC", "iterations"): lambda kw: gj.control.MPC(gj.control.ILQR(), **{kw: 2}),
    ("fit_neural_ode", "steps"): _fit_neural_ode,
    # a value the input checks reject, before any compilation: the message shows it arrived
    ("fit_model", "steps"): lambda kw: _outcome(
        lambda: gj.learn.fit_model(_pendulum_model(), [], **{kw: 0})
    ),
    ("fit_parameters", "max_steps"): lambda kw: _outcome(
        lambda: gj.learn.fit_parameters(_pendulum_model(), [], "not a function", **{kw: 0})
    ),
    ("optimize", "steps"): lambda kw: _outcome(
        lambda: gj.control.optimize(lambda p: jnp.sum(p**2), jnp.ones(2), **{kw: 0})
    ),
    ("optimize_restarts", "steps"): lambda kw: _outcome(
        lambda: gj.control.optimize_restarts(
            lambda p: jnp.sum(p**2), lambda key: jnp.ones(2), jax.random.key(0), 2, **{kw: 0}
        )
    ),
}


def _same(a, b):
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb
    for x, y in zip(la, lb, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_the_table_is_there_and_well_formed():
    assert len(ROWS) >= 15
    names = [r["Deprecated"] for r in ROWS]
    assert len(set(names)) == len(names)
    for row in ROWS:
        kind, owner, _ = parse(row["Deprecated"])
        assert parse(row["Replacement"])[:2] == (kind, owner), row
        assert row["Since"], row
        importlib.import_module(row["Module"])


@pytest.mark.parametrize("row", ROWS, ids=[r["Deprecated"] for r in ROWS])
def test_deprecated_name_warns_and_gives_the_new_names_value(row):
    kind, owner, old = parse(row["Deprecated"])
    _, _, new = parse(row["Replacement"])
    module = importlib.import_module(row["Module"])
    module_attribute = owner == row["Module"]  # a former name of a module's attribute
    assert module_attribute or hasattr(module, owner.split(".")[0]), row
    new_mention = re.escape(new if kind == "keyword" else row["Replacement"])
    if kind == "attribute":
        obj = module if module_attribute else INSTANCES[row["Module"], owner]()
        expected = getattr(obj, new)
        with pytest.warns(DeprecationWarning, match=new_mention):
            got = getattr(obj, old)
    else:
        call = CALLS[owner, old]
        expected = call(new)
        with pytest.warns(DeprecationWarning, match=new_mention):
            got = call(old)
        if isinstance(got, str):  # an input error names the argument as the caller passed it
            got = got.replace(f"'{old}'", f"'{new}'")
    _same(got, expected)


def test_run_mpc_state0_positional_and_keyword():
    from geomjax.control import run_mpc

    bad = gj.RigidBodyState(jnp.eye(3), jnp.zeros(4))  # the plant state, of the wrong shape
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the new name and positions: no warning
        with pytest.raises(ValueError, match="'state0'"):
            run_mpc(_problem(), None, None, bad, 3)
        with pytest.raises(ValueError, match="'state0'"):
            run_mpc(_problem(), state0=bad, steps=3)
    with (
        pytest.warns(DeprecationWarning, match="'state0'"),
        pytest.raises(ValueError, match="'x0'"),
    ):
        run_mpc(_problem(), x0=bad, steps=3)
    with pytest.raises(ValueError, match="'state0' only"):
        run_mpc(_problem(), state0=bad, x0=bad, steps=3)


def test_the_table_parser_reads_a_table():
    text = (
        "intro\n\n| Deprecated | Replacement | Module | Since |\n|---|---|---|---|\n"
        "| `A.b` | `A.c` | `geomjax` | one change |\n| `f(x=)` | `f(y=)` | `geomjax` | another |\n"
        "\nafter\n| not | a | row |\n"
    )
    assert deprecation_table(text) == [
        {"Deprecated": "A.b", "Replacement": "A.c", "Module": "geomjax", "Since": "one change"},
        {"Deprecated": "f(x=)", "Replacement": "f(y=)", "Module": "geomjax", "Since": "another"},
    ]
    assert parse("OnlineMPC.init(us=)") == ("keyword", "OnlineMPC.init", "us")
    assert parse("OCPSolution.us") == ("attribute", "OCPSolution", "us")
