"""The documentation site's examples run as written (each page in its own namespace, blocks in
order) and say what they claim; the site's sources are complete."""

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(
    p
    for p in DOCS.rglob("*.md")
    if not {"gallery", "results"} & set(p.relative_to(DOCS).parts)  # generated at build time
)


def run_page(path: Path) -> dict:
    import geomjax as gj
    from geomjax import SE3, SO3

    blocks = re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)
    ns: dict = {"jax": jax, "jnp": jnp, "gj": gj, "SO3": SO3, "SE3": SE3}
    for block in blocks:
        exec(compile(block, str(path), "exec"), ns)
    return ns


def check_getting_started(ns):
    e = ns["d"]["energy"]
    assert float(jnp.max(jnp.abs(e / e[0] - 1))) < 1e-3  # LGVI: bounded energy error
    assert float(ns["sol"].max_residual) < 1e-12 and bool(jnp.all(jnp.isfinite(ns["g"])))
    assert ns["sols"].states.R.shape == (1024, 101, 3, 3)


def check_lie_groups(ns):
    np.testing.assert_allclose(ns["w"], [0.1, -0.4, 2.9], atol=1e-12)  # log(exp(w)) = w, θ < π
    Rs = ns["Rs"]
    np.testing.assert_allclose(
        jnp.swapaxes(Rs, -1, -2) @ Rs, jnp.broadcast_to(jnp.eye(3), Rs.shape), atol=1e-12
    )


def check_geometry(ns):
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


def check_nonholonomic(ns):
    q, v = ns["knife_sol"].states.g, ns["knife_sol"].states.v  # the knife edge keeps its constraint
    viol = v[:, 0] * jnp.sin(q[:, 2]) - v[:, 1] * jnp.cos(q[:, 2])
    assert float(jnp.max(jnp.abs(viol))) < 1e-12


def check_variational(ns):
    qs = ns["vsol"].states.q  # RATTLE keeps |q| = 1 at round-off
    assert float(jnp.max(jnp.abs(jnp.sum(qs * qs, -1) - 1.0))) < 1e-13
    assert float(jnp.min(ns["bsol"].states.q[:, 1])) >= -1e-12  # the ball stays above the floor


def check_control(ns):
    # the optimized torques bring the body to rest at R_goal, re-simulated here
    gj, SO3 = ns["gj"], ns["SO3"]
    u = ns["basis"] @ ns["res"].params
    rest = gj.RigidBodyState(jnp.eye(3), jnp.zeros(3))
    end = gj.simulate(ns["body"], gj.LGVI(), rest, ns["dt"], ns["steps"], u).final_state
    err = SO3.log(ns["R_goal"].T @ end.R)
    assert float(err @ err) < 1e-6
    assert float(jnp.linalg.norm(end.Pi)) < 1e-3


def check_base_controlled(ns):
    # a small shape loop turns the body by exp(−F·area) (to O(ε³))
    w = ns["gj"].SO3.log(ns["turns"][0])
    pred = -ns["curv"][:, 0, 1] * np.pi * 0.05**2
    assert float(jnp.linalg.norm(w - pred)) < 0.05 * float(jnp.linalg.norm(pred))
    # nonholonomic phases of the disk: they compose to g (trapezoidal rule, O(h²) ≈ 1e-3), the
    # trivial gauge is already nonholonomic (g_NH = 0), the heading turns at θ̇ = ⟨v, μ⟩/(mR² + I)
    ph, g = ns["ph"], ns["sol"].states.g
    assert float(jnp.max(jnp.abs(ph["composed"] - g))) < 1e-3
    assert float(jnp.max(jnp.abs(ph["holonomy"]))) < 1e-14
    thd = 0.9 / (1.3 * 0.7**2 + 0.5)
    # (MomentumLGVI, second order, h ≈ 0.03: observed 1.7e-4)
    assert abs(float(g[-1, 2]) - thd * 2 * np.pi) < 1e-3


def check_learning(ns):
    # the identified heavy top is within 1 % of the values the records were made with
    I, rho = (np.asarray(v) for v in ns["res"].values)
    assert np.linalg.norm(I - ns["I_true"]) < 0.01 * np.linalg.norm(ns["I_true"])
    assert np.linalg.norm(rho - ns["rho_true"]) < 0.01 * np.linalg.norm(ns["rho_true"])
    # the learned pendulum is a system like any other (on the group), fitted to the noise: the
    # loss ½Σr² in noise units is below the number of residuals (≈ half of it at the optimum)
    assert float(jnp.max(ns["gj"].SO3.defect(ns["sol"].states.R))) < 1e-12
    assert ns["losses"][-1] < sum(6 * d.num_samples for d in ns["data"])


CHECKS = {
    "getting-started.md": check_getting_started,
    "lie-groups.md": check_lie_groups,
    "geometry.md": check_geometry,
    "nonholonomic.md": check_nonholonomic,
    "variational.md": check_variational,
    "control.md": check_control,
    "base-controlled.md": check_base_controlled,
    "learning.md": check_learning,
}


def test_every_page_with_code_has_a_check():
    with_code = {p.name for p in PAGES if "```python" in p.read_text()}
    assert with_code <= set(CHECKS) | {"index.md"}, with_code - set(CHECKS)


# pages whose examples run for ~5 s or more (optimizations, phase computations, integrations):
# the long tier, with the notebooks (make test-full; CI runs both tiers); the getting-started and
# Lie-group pages stay in the default tier
LONG_PAGES = {
    "control.md",
    "base-controlled.md",
    "variational.md",
    "geometry.md",
    "nonholonomic.md",
    "learning.md",
}


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, marks=[pytest.mark.long] if p.name in LONG_PAGES else [])
        for p in PAGES
        if "```python" in p.read_text()
    ],
    ids=lambda p: p.name,
)
def test_page_examples_run_and_hold(path):
    ns = run_page(path)
    check = CHECKS.get(path.name)
    if check is not None:
        check(ns)


def test_project_names_no_issue_and_no_outside_path():
    """Code, tests, docs, notebooks and the README cite papers by author, title and section and
    name capabilities: never an issue number, a seed file or a path outside the repository."""
    root = DOCS.parent
    files = [root / "README.md", *DOCS.rglob("*.md")]
    for folder in ("geomjax", "tests", "benchmarks", "notebooks"):
        files += [p for p in (root / folder).rglob("*") if p.suffix in {".py", ".ipynb", ".md"}]
    pattern = re.compile(
        # assembled from parts so that this file does not match itself
        "|".join(
            [
                r"[Ii]ssue" + r" #?\d",
                r"\b[Ss]eeds? ?0{0,2}[0-4]\b",
                r"\.\./" + "shared",
                "shared" + "/notes",
                "/work/",
                "seeds/",
            ]
        )
    )
    bad = [
        f"{p.relative_to(root)}: {m.group()}"
        for p in files
        for m in [pattern.search(p.read_text())]
        if m and p != Path(__file__)
    ]
    assert not bad, bad
