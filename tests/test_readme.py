"""The README's examples run as written (one namespace, in order) and say what they claim."""

import re
from pathlib import Path

import jax.numpy as jnp
import numpy as np

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_examples_run_and_hold():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 3
    ns: dict = {}
    run = lambda code: exec(compile(code, str(README), "exec"), ns)  # noqa: E731

    run(blocks[0])  # the 30-second example
    np.testing.assert_allclose(ns["w"], [0.1, -0.4, 2.9], atol=1e-12)  # log(exp(w)) = w, θ < π
    e = ns["gj"].diagnostics(ns["body"], ns["sol"])["energy"]
    assert float(jnp.max(jnp.abs(e / e[0] - 1))) < 1e-3  # LGVI: bounded energy error
    assert float(ns["sol"].max_residual) < 1e-12 and bool(jnp.all(jnp.isfinite(ns["g"])))

    run("\n".join(blocks[1:]))
    assert ns["G"].shape == (2, 2, 2) and ns["Gs"].shape == (10_000, 2, 2, 2)
    a_full = -jnp.einsum("kij,i,j->k", ns["G"], ns["v"], ns["v"])
    np.testing.assert_allclose(ns["a"], a_full, atol=1e-13)
    # sphere: reaction −m(|ẋ|²/r + g·n) n, the same through the level-set route, no power
    m, r, x, xd = ns["m"], ns["r"], ns["x"], ns["xd"]
    n = x / r
    expected = -m * (xd @ xd / r + jnp.array([0.0, 0.0, -9.81]) @ n) * n
    np.testing.assert_allclose(ns["reaction"], expected, atol=1e-12)
    np.testing.assert_allclose(ns["same_reaction"], expected, atol=1e-12)
    assert abs(float(expected @ xd)) < 1e-12
    # the knife edge keeps its constraint along the run
    q, v = ns["knife_sol"].states.g, ns["knife_sol"].states.v
    viol = v[:, 0] * jnp.sin(q[:, 2]) - v[:, 1] * jnp.cos(q[:, 2])
    assert float(jnp.max(jnp.abs(viol))) < 1e-12
    # variational: RATTLE keeps |q| = 1 at round-off, the ball stays above the floor
    qs = ns["vsol"].states.q
    assert float(jnp.max(jnp.abs(jnp.sum(qs * qs, -1) - 1.0))) < 1e-13
    assert float(jnp.min(ns["bsol"].states.q[:, 1])) >= -1e-12

    # trajectory optimization: the optimized torques bring the body to rest at R_goal (< 1e-3 rad)
    gj, SO3 = ns["gj"], ns["SO3"]
    u = ns["basis"] @ ns["res"].params
    rest = gj.RigidBodyState(jnp.eye(3), jnp.zeros(3))
    end = gj.simulate(ns["body"], gj.LGVI(), rest, ns["dt"], ns["steps"], u).final_state
    assert float(SO3.log(ns["R_goal"].T @ end.R) @ SO3.log(ns["R_goal"].T @ end.R)) < 1e-6
    assert float(jnp.linalg.norm(end.Pi)) < 1e-3

    # base-controlled systems: a small shape loop turns the body by exp(−F·area) (to O(ε³))
    w = ns["gj"].SO3.log(ns["turns"][0])
    pred = -ns["curv"][:, 0, 1] * np.pi * 0.05**2
    assert float(jnp.linalg.norm(w - pred)) < 0.05 * float(jnp.linalg.norm(pred))
