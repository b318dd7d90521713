"""The documentation site's examples run exactly as written: each page's code blocks, in order, in
a fresh Python process with nothing injected (a block that uses a name must import it, as a
reader pasting the page into a new interpreter would), and they say what they claim (a check per
page, run in the same process on the page's namespace). The site's sources are complete."""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(
    p
    for p in DOCS.rglob("*.md")
    if not {"gallery", "results"} & set(p.relative_to(DOCS).parts)  # generated at build time
)

# fence languages: executed ones, and those listed as not executed (shell blocks of install and
# make commands only; test_shell_blocks_are_commands_only holds them to that)
EXECUTED = {"python", "py", "pycon"}
NOT_EXECUTED = {"bash"}
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", flags=re.S | re.M)


def fences(path: Path) -> list[tuple[str, str]]:
    return FENCE.findall(path.read_text())


def pycon_to_python(text: str) -> str:
    """The input lines of an interactive session (``>>>`` and ``...`` prompts); output dropped."""
    lines = []
    for line in text.splitlines():
        if line.startswith((">>> ", "... ")) or line in (">>>", "..."):
            lines.append(line[4:])
    return "\n".join(lines) + "\n"


def code_blocks(path: Path) -> list[str]:
    return [
        pycon_to_python(body) if lang == "pycon" else body
        for lang, body in fences(path)
        if lang in EXECUTED
    ]


# run in a fresh interpreter: the page's blocks in order in one namespace (a fresh ``__main__``),
# then the page's check from this file; the namespace holds only what the page itself defined
_RUNNER = textwrap.dedent(
    """
    import importlib.util, json, sys
    page, test_file, name = sys.argv[1], sys.argv[2], sys.argv[3]
    blocks = json.loads(sys.stdin.read())
    ns = {"__name__": "__main__"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"{page} (block {i + 1})", "exec"), ns)
    spec = importlib.util.spec_from_file_location("_docs_checks", test_file)
    checks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checks)
    check = checks.CHECKS.get(name)
    if check is not None:
        check(ns)
    print("PAGE OK", len(blocks))
    """
)


def page_name(path: Path) -> str:
    return path.relative_to(DOCS).as_posix()


def run_page(path: Path, cwd: Path) -> None:
    env = dict(os.environ)
    env.setdefault("JAX_PLATFORMS", "cpu")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("JAX_ENABLE_X64", None)  # a page that wants float64 says so
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER, str(path), __file__, page_name(path)],
        input=json.dumps(code_blocks(path)),
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,  # files a page writes go nowhere
        timeout=900,
    )
    assert proc.returncode == 0 and "PAGE OK" in proc.stdout, (
        f"{path.relative_to(ROOT)}: its code blocks, pasted in order into a fresh interpreter, "
        f"fail:\n{proc.stderr[-4000:]}"
    )


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
    # second-order solve: converged, the torque limit active and held exactly
    sol, problem = ns["sol"], ns["problem"]
    assert sol.stop_reason == "converged" and float(jnp.abs(sol.controls).max()) == 1.0
    assert sol.states.R.shape == (21, 3, 3) and sol.K.shape == (20, 3, 6)
    # the controls re-simulated by another integrator (RKMK4, 10 substeps a node) end near R*
    fine = gj.simulate(
        problem.system,
        gj.RKMK4(),
        problem.state0,
        0.02,
        200,
        controls=jnp.repeat(sol.controls, 10, 0),
    ).final_state
    assert float(jnp.linalg.norm(SO3.log(ns["target"].T @ fine.R))) < 0.05
    assert float(jnp.max(jnp.abs(ns["again"].states.R - sol.states.R))) <= 1e-14
    assert ns["warm"].stop_reason == "converged" and int(ns["warm"].iterations) == 1
    al = ns["al"]  # the exact target: met by the re-simulated controls
    assert al.stop_reason == "converged" and float(al.violation) <= 1e-6
    end = gj.simulate(problem.system, gj.LGVI(), problem.state0, 0.2, 20, al.controls).final_state
    assert float(jnp.linalg.norm(SO3.log(ns["target"].T @ end.R))) <= 1e-5
    # MPC: the plant re-simulated with the applied controls gives the recorded states, and the
    # target residual shrinks on the mismatched plant
    res = ns["closed"]
    replay = gj.simulate(ns["plant"], gj.RKMK4(), problem.state0, 0.2, 30, res.controls)
    np.testing.assert_allclose(replay.states.R, res.states.R, atol=1e-12)
    assert float(res.error[-1]) < 0.3 * float(res.error[0])
    # constrained MPC: the rate limit held on the plant's states, broken without it
    rates = [jnp.abs(ns[k].states.Pi / ns["inertia"]).max() for k in ("free", "kept")]
    assert float(rates[0]) > 0.5 and float(rates[1]) <= 0.3 + 1e-6
    assert bool(ns["kept"].healthy) and float(ns["kept"].error[-1]) < 1e-5
    # the heavier quadrotor: within 2 cm of the goal from step 40 on, read from the plant's
    # position, and healthy; the plant too heavy for its thrust limits falls and is flagged
    quad, flight, goal = ns["quad"], ns["flight"], np.array([2.0, 1.0, 1.5])
    miss = np.linalg.norm(np.asarray(flight.states.g[:, :3, 3]) - goal, axis=-1)
    assert miss[40:].max() <= 0.02 and miss[-1] <= 0.004
    assert bool(flight.healthy) and "healthy" in ns["flight"].summary()
    np.testing.assert_allclose(float(quad.potential.mass), 1.1 * 1.477, rtol=1e-12)
    heavy = ns["heavy"]
    assert float(heavy.states.g[-1, 2, 3]) < -1.0
    assert bool(heavy.diverging) and not bool(heavy.healthy)
    # the derivative of the optimum against central differences of re-solved problems
    np.testing.assert_allclose(float(ns["dJ"]), float(ns["fd"]), rtol=1e-6)
    # the persistent cache: the solve's program written to the directory, the same optimum
    from pathlib import Path

    written = [f.name for f in Path(ns["cache"]).iterdir()]
    assert any(name.startswith("jit__solve_traced-") for name in written)
    assert ns["cached"].stop_reason == "converged"
    np.testing.assert_allclose(ns["cached"].controls, sol.controls, atol=1e-12)


def check_choosing_an_optimizer(ns):
    # iLQR, DDP and L-BFGS shooting reach one optimum; the trajectory optimizers in fewer
    # iterations; the optimum is stationary (central differences of the rollout cost)
    ilqr, ddp, lbfgs = ns["ilqr"], ns["ddp"], ns["lbfgs"]
    assert ilqr.stop_reason == ddp.stop_reason == "converged"
    np.testing.assert_allclose(float(ddp.cost), float(ilqr.cost), rtol=1e-9)
    np.testing.assert_allclose(float(lbfgs.loss), float(ilqr.cost), rtol=1e-6)
    # the program compiled for fast iterations reaches the same optimum
    np.testing.assert_allclose(float(ns["fast"].cost), float(ilqr.cost), rtol=1e-9)
    np.testing.assert_allclose(ns["fast"].controls, ilqr.controls, atol=1e-6)
    assert int(ddp.iterations) <= int(ilqr.iterations) < int(lbfgs.iterations)
    J = ns["jax"].jit(ns["shooting_cost"])
    eps = 1e-6

    def fd_grad(u):
        return np.array(
            [
                (float(J(jnp.asarray(u + e))) - float(J(jnp.asarray(u - e)))) / (2 * eps)
                for e in eps * np.eye(u.size).reshape(-1, *u.shape)
            ]
        )

    g_opt, g_zero = fd_grad(np.asarray(ilqr.controls)), fd_grad(np.zeros(ilqr.controls.shape))
    # the stop test bounds the expected improvement by 1e-10 (1 + J): |∇J| ≲ 1e-5 relative
    assert np.abs(g_opt).max() < 1e-4 * np.abs(g_zero).max()


def check_api_control(ns):
    # warm-started at the optimum, the first online tick's solve stops at once and applies the
    # optimum's first control; the next ticks stay near the open-loop plan (model = plant);
    # L-BFGS shooting reaches the cost of the trajectory optimizer
    sol, x = ns["sol"], ns["x"]
    np.testing.assert_allclose(ns["applied"][0], sol.controls[0], atol=1e-12)
    assert float(jnp.abs(x.R - sol.states.R[3]).max()) < 0.05
    assert ns["res"].stop_reason in ("converged", "gtol", "max_iters")
    np.testing.assert_allclose(float(ns["res"].loss), float(sol.cost), rtol=1e-6)


def check_learning(ns):
    # the identified heavy top is within 1 % of the values the records were made with
    I, rho = (np.asarray(v) for v in ns["res"].values)
    assert np.linalg.norm(I - ns["I_true"]) < 0.01 * np.linalg.norm(ns["I_true"])
    assert np.linalg.norm(rho - ns["rho_true"]) < 0.01 * np.linalg.norm(ns["rho_true"])
    # the learned pendulum is a system like any other (on the group), fitted to the noise: the
    # loss ½Σr² in noise units is below the number of residuals (≈ half of it at the optimum)
    assert float(jnp.max(ns["gj"].SO3.defect(ns["sol"].states.R))) < 1e-12
    assert ns["losses"][-1] < sum(6 * d.num_samples for d in ns["data"])
    # the quadrotor: mass, inertia and thrust map against the values its flights were made with,
    # and the plan on the learned model flown on the true dynamics (DOP853) reaches the target
    T = ns["T"]
    assert abs(float(ns["m_fit"]) - T["mass"]) < 5e-3 * T["mass"]
    assert np.linalg.norm(ns["J_fit"] - T["inertia"]) < 0.02 * np.linalg.norm(T["inertia"])
    assert abs(float(ns["k_fit"]) - T["moment_coefficient"]) < 0.05 * T["moment_coefficient"]
    assert ns["miss"] < 0.02
    # a configuration-dependent inertia on SO(3): on the group, the energy conserved to O(h²)
    sol_I, top = ns["sol_I"], ns["top"]
    assert float(jnp.max(ns["gj"].SO3.defect(sol_I.states.g))) < 1e-12

    def energy(g, v):
        return 0.5 * v @ top.inertia(g) @ v + top.potential(g)

    E = np.asarray(ns["jax"].vmap(energy)(sol_I.states.g, sol_I.states.v))
    assert np.max(np.abs(E - E[0])) < 1e-2 * (1 + abs(E[0]))


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


def check_index(ns):
    e = ns["gj"].diagnostics(ns["body"], ns["sol"])["energy"]
    assert float(jnp.max(jnp.abs(e / e[0] - 1))) < 1e-3  # LGVI: bounded energy error


def check_rigid_bodies(ns):
    # the composition's error is far below the LGVI's at the same step (orders 6 and 2)
    assert float(ns["err6"]) < 1e-2 * float(ns["err2"]) and float(ns["err2"]) > 0
    # the reversible adjoint equals plain reverse mode to round-off; both match central
    # differences of the page's own function
    np.testing.assert_allclose(ns["g_reversible"], ns["g_plain"], rtol=1e-9, atol=1e-12)
    f, pi0, eps = ns["final_spin"], ns["s0"].Pi, 1e-6
    fd = [(f(pi0 + eps * e) - f(pi0 - eps * e)) / (2 * eps) for e in jnp.eye(3)]
    np.testing.assert_allclose(ns["g_plain"], jnp.stack(fd), rtol=1e-5, atol=1e-7)
    # the restart continues the run: same final state as the uninterrupted one
    a, b = ns["rest"].final_state, ns["whole"].final_state
    np.testing.assert_allclose(a.R, b.R, rtol=0, atol=1e-13)
    np.testing.assert_allclose(a.Pi, b.Pi, rtol=0, atol=1e-13)


def check_scale(ns):
    sol, B = ns["sol"], ns["B"]
    assert sol.states.R.shape == (B, 11, 3, 3)
    # the sharded run equals the plain simulate of the same bodies (float32 round-off), and |Π|
    # (a Casimir of the free body) is kept
    gj, jax = ns["gj"], ns["jax"]
    for i in (0, B - 1):
        s = jax.tree.map(lambda x, i=i: x[i], ns["states0"])
        one = gj.simulate(ns["body"], gj.LGVI(), s, 0.01, 1000, save_every=100)
        np.testing.assert_allclose(sol.states.R[i], one.states.R, atol=1e-5)
    pin = jnp.linalg.norm(sol.states.Pi, axis=-1)
    np.testing.assert_allclose(pin, pin[:, :1] * jnp.ones_like(pin), rtol=1e-5)

    # the batch of solves equals the solves one by one (a second computation), and each converged
    sols, one = ns["solutions"], ns["solve_ocp"]
    for i, a in enumerate(ns["angles"]):
        ref = one(ns["problem"](a), ns["ILQR"](), max_iters=30)
        np.testing.assert_allclose(sols.controls[i], ref.controls, rtol=1e-9, atol=1e-12)
        assert bool(ref.succeeded)
    assert ns["closed_loop"].controls.shape == (4, 2, 3)


def check_choosing_an_integrator(ns):
    # fitted orders against a reference from another method: 2, 2, 4, 4
    expected = {"LGVI": 2, "splitting": 2, "RKMK4": 4, "LGVI, suzuki4": 4}
    for name, p in expected.items():
        assert abs(float(ns["orders"][name]) - p) < 0.3, (name, ns["orders"][name])


def check_choosing_a_gradient(ns):
    g = ns["grads"]
    for steps in (200, 800):  # the three ways agree (round-off of the rebuilt trajectory)
        for way in ("checkpoint", "reversible"):
            np.testing.assert_allclose(g[way, steps], g["plain", steps], rtol=1e-8, atol=1e-11)
    # central differences of the page's own loss
    f, pi0, eps = ns["loss"], ns["pi0"], 1e-6
    fd = jnp.stack(
        [(f(pi0 + eps * e, 200) - f(pi0 - eps * e, 200)) / (2 * eps) for e in jnp.eye(3)]
    )
    np.testing.assert_allclose(g["plain", 200], fd, rtol=1e-6, atol=1e-8)
    # the memory the page claims: plain reverse mode grows with the steps (×4 steps: over ×3),
    # the reversible adjoint does not
    m = ns["memory"]
    assert m["plain", 800] > 3 * m["plain", 200]
    assert m["reversible", 800] <= m["reversible", 200] * 1.1
    assert m["reversible", 800] < m["checkpoint", 800] < m["plain", 800]


def check_sharp_bits(ns):
    # geomjax.jit's gradient: jax.jit's to round-off, and central differences of the loss
    g, g_ref = np.asarray(ns["g"]), np.asarray(ns["g_ref"])
    np.testing.assert_allclose(g, g_ref, rtol=1e-10, atol=1e-12)
    x, h = np.array([0.8, -0.3, 1.1]), 1e-6
    fd = [
        (float(ns["loss"](x + h * e)) - float(ns["loss"](x - h * e))) / (2 * h) for e in np.eye(3)
    ]
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)
    assert ns["sol32"].states.Pi.dtype == jnp.float32  # the state's dtype wins over x64
    assert float(ns["casimir"]["float64"]) < 1e-13
    assert 1e-13 < float(ns["casimir"]["float32"]) < 1e-5
    a, b = ns["sol_a"], ns["sol_b"]  # the jitted closure ran with two step sizes
    np.testing.assert_allclose([a.times[-1], b.times[-1]], [1.0, 2.0], rtol=1e-12)
    assert "did not converge" in ns["message"] and "newton_iters" in ns["message"]
    assert float(ns["bad"].max_residual) > 1e-10


def check_extending(ns):
    # the LGVI on the new group against the closed form s = 0.3 cos 2t, θ = 1.5 t
    ts = ns["sol"].times
    assert float(jnp.max(jnp.abs(ns["s"] - 0.3 * jnp.cos(2 * ts)))) < 2e-4  # O(dt²)
    assert float(jnp.max(jnp.abs(ns["theta"] - 1.5 * ts))) < 1e-10  # abelian: exact
    # the new first-order method: error against the closed form halves with the step
    group = ns["group"]
    errs = []
    for sol in (ns["coarse"], ns["finer"]):
        s = group.log(sol.states.g)[:, 0]
        errs.append(float(jnp.max(jnp.abs(s - 0.3 * jnp.cos(2 * sol.times)))))
    ratio = errs[0] / errs[1]  # first order: halving dt halves the error
    assert ratio > 1.7 and ratio < 2.3, errs


def check_errors(ns):
    inertia, group, method = ns["messages"]
    assert "'inertia'" in inertia and "positive" in inertia
    assert "'state0.R'" in group and "SO3" in group
    assert "RATTLE" in method and "RigidBody" in method


def check_api_lie(ns):
    np.testing.assert_allclose(ns["x"], [0.0, 1.0, 0.0], atol=1e-15)
    np.testing.assert_allclose(ns["T_identity"], jnp.eye(4), atol=1e-15)
    np.testing.assert_allclose(ns["angle"], [0.7], atol=1e-15)
    assert ns["pose"].shape == (3, 3)
    np.testing.assert_array_equal(ns["shifted"], [1.0, 2.0, 3.0])


def check_api_systems(ns):
    np.testing.assert_allclose(ns["kinetic"], 0.5 * (1 / 1 + 4 / 2 + 9 / 3), rtol=1e-15)
    # the heavy top at rest, upright: V = m g ⟨e_z, R ρ⟩ = 1 · 9.81 · 0.2
    rest = ns["gj"].RigidBodyState(R=jnp.eye(3), Pi=jnp.zeros(3))
    np.testing.assert_allclose(ns["top"].energy(rest), 9.81 * 0.2, rtol=1e-14)
    assert abs(float(ns["sleigh0"].v[2])) < 1e-15  # the blade: no lateral velocity


def check_api_integrators(ns):
    sol, again = ns["sol"], ns["again"]
    assert sol.states.R.shape == (11, 3, 3)
    np.testing.assert_array_equal(again.states.R, sol.states.R)  # the file round trip: bitwise
    np.testing.assert_array_equal(again.states.Pi, sol.states.Pi)
    # order 4 at dt = 0.05 against the LGVI at dt = 0.01 over the same time: both near the
    # same end state (|Π| is a Casimir, kept to round-off by both)
    a, b = ns["order4"].final_state, sol.final_state
    np.testing.assert_allclose(jnp.linalg.norm(a.Pi), jnp.linalg.norm(b.Pi), rtol=1e-13)
    assert float(jnp.max(jnp.abs(a.R - b.R))) < 1e-3


def check_api_riemann(ns):
    th = 0.7  # the round sphere: Γ^θ_φφ = −sin θ cos θ, Γ^φ_θφ = cot θ, K = 1
    G = ns["G"]
    np.testing.assert_allclose(G[0, 1, 1], -np.sin(th) * np.cos(th), rtol=1e-13)
    np.testing.assert_allclose([G[1, 0, 1], G[1, 1, 0]], [1 / np.tan(th)] * 2, rtol=1e-13)
    np.testing.assert_allclose(G[0, 0, 0], 0.0, atol=1e-15)
    np.testing.assert_allclose(ns["K"], 1.0, rtol=1e-12)


def check_api_variational(ns):
    from scipy.integrate import solve_ivp

    sol = ns["sol"]
    ref = solve_ivp(
        lambda t, y: [y[1], -np.sin(y[0])], (0, 7.0), [0.1, 0.0], rtol=1e-12, atol=1e-12
    ).y[0, -1]
    assert abs(float(sol.states.q[-1, 0]) - ref) < 1e-5  # second order, dt = 0.01: ~1e-6


CHECKS = {
    "api/lie.md": check_api_lie,
    "api/systems.md": check_api_systems,
    "api/integrators.md": check_api_integrators,
    "api/riemann.md": check_api_riemann,
    "api/variational.md": check_api_variational,
    "api/control.md": check_api_control,
    "guides/choosing-an-integrator.md": check_choosing_an_integrator,
    "guides/choosing-a-gradient.md": check_choosing_a_gradient,
    "sharp-bits.md": check_sharp_bits,
    "guides/extending.md": check_extending,
    "errors.md": check_errors,
    "index.md": check_index,
    "guides/rigid-bodies.md": check_rigid_bodies,
    "guides/scale.md": check_scale,
    "getting-started.md": check_getting_started,
    "guides/lie-groups.md": check_lie_groups,
    "guides/geometry.md": check_geometry,
    "guides/nonholonomic.md": check_nonholonomic,
    "guides/variational.md": check_variational,
    "guides/control.md": check_control,
    "guides/learning.md": check_learning,
    "guides/choosing-an-optimizer.md": check_choosing_an_optimizer,
    "guides/base-controlled.md": check_base_controlled,
}


def pages_with_code() -> list[Path]:
    return [p for p in PAGES if code_blocks(p)]


def test_every_fence_language_is_run_or_listed():
    """A block in a language this file neither runs nor lists would go unchecked."""
    unknown = {
        f"{p.relative_to(DOCS)}: ```{lang or '(no language)'}"
        for p in PAGES
        for lang, _ in fences(p)
        if lang not in EXECUTED | NOT_EXECUTED
    }
    assert not unknown, unknown


def test_shell_blocks_are_commands_only():
    """Shell blocks are not executed, so they may hold only install and make commands."""
    bad = [
        f"{p.relative_to(DOCS)}: {line}"
        for p in PAGES
        for lang, body in fences(p)
        if lang in NOT_EXECUTED
        for line in body.splitlines()
        if line.strip() and line.split()[0] not in {"pip", "make", "apt-get"}
    ]
    assert not bad, bad


def test_pycon_blocks_run_their_input_lines():
    session = ">>> x = [1,\n...      2]\n>>> sum(x)\n3\n>>> for k in x:\n...     y = k\n...\n"
    assert pycon_to_python(session) == "x = [1,\n     2]\nsum(x)\nfor k in x:\n    y = k\n\n"
    ns: dict = {}
    exec(pycon_to_python(session), ns)
    assert ns["y"] == 2


def test_every_page_with_code_has_a_check():
    with_code = {page_name(p) for p in pages_with_code()}
    assert with_code <= set(CHECKS), with_code - set(CHECKS)


# the long tier (make test-full; CI runs both tiers), with the notebooks: the pages whose
# examples run for several seconds (optimizations, phase computations, integrations, gradients)
# and the API pages' examples; the default tier keeps the home page, getting started, the Lie
# groups guide and the errors page (a fresh process each, 1.5-7 s on a loaded 2-core machine)
LONG_PAGES = {
    "guides/control.md",
    "guides/learning.md",
    "guides/choosing-an-optimizer.md",
    "guides/base-controlled.md",
    "guides/variational.md",
    "guides/geometry.md",
    "guides/nonholonomic.md",
    "guides/scale.md",
    "guides/rigid-bodies.md",
    "guides/choosing-an-integrator.md",
    "guides/choosing-a-gradient.md",
    "guides/extending.md",
    "sharp-bits.md",
    "api/lie.md",
    "api/systems.md",
    "api/integrators.md",
    "api/riemann.md",
    "api/variational.md",
    "api/control.md",
}


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, marks=[pytest.mark.long] if page_name(p) in LONG_PAGES else [])
        for p in pages_with_code()
    ],
    ids=page_name,
)
def test_page_examples_run_and_hold(path, tmp_path):
    run_page(path, tmp_path)


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
    assert not (bad := _matches(files, pattern, root)), bad


def _matches(files, pattern, root):
    """``"path: match"`` of the first match of ``pattern`` in each file but this one."""
    return [
        f"{p.relative_to(root)}: {m.group()}"
        for p in files
        for m in [pattern.search(p.read_text())]
        if m and p != Path(__file__)
    ]


def test_sources_describe_behaviour_not_their_history():
    """Docstrings, comments and pages state the equation, the paper and the behaviour, and
    figures with their machine and setting: never the project's own process history (a
    numbered work round, "re-measured", a working session)."""
    root = DOCS.parent
    files = [root / "README.md", *DOCS.rglob("*.md")]
    for folder in ("geomjax", "tests", "benchmarks", "notebooks"):
        files += [p for p in (root / folder).rglob("*") if p.suffix in {".py", ".ipynb", ".md"}]
    pattern = re.compile(
        # assembled from parts so that this file does not match itself
        "|".join([r"\b[Ss]top" + r" \d+\b", r"\b[Rr]e-" + "measured", r"\bthis " + r"session\b"])
    )
    assert not (bad := _matches(files, pattern, root)), bad
    assert pattern.search("as this " + "session found") and pattern.search("at stop" + " 25")
