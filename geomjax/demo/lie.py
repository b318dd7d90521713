"""Demo section: the Lie group layer."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from .. import SE2, SE3, SO2, SO3
from ._report import Check


def naive_so3_log(R):
    """Textbook log: θ = arccos((tr R − 1)/2), ω = θ/(2 sin θ) vee(R − Rᵀ). Ill-conditioned at π."""
    c = jnp.clip((jnp.trace(R, axis1=-2, axis2=-1) - 1) / 2, -1.0, 1.0)
    th = jnp.arccos(c)
    v = jnp.stack(
        [R[..., 2, 1] - R[..., 1, 2], R[..., 0, 2] - R[..., 2, 0], R[..., 1, 0] - R[..., 0, 1]], -1
    )
    return (th / (2 * jnp.sin(th)))[..., None] * v


def _roundtrip_error(G, key, n):
    # one compiled function per check: run eagerly, every small array op of the group layer would
    # compile its own kernel on first use (the section, --fast, 2-core CPU: 10.8 s eager, 5.5 s)
    g = G.random(key, (n,))
    return jnp.max(jnp.abs(G.exp(G.log(g)) - g))


def _expm_error(xi):
    from jax.scipy.linalg import expm

    return jnp.max(jnp.abs(SE3.exp(xi) - expm(SE3.hat(xi))))


def _jac_right_error(x0, h):
    """``|J_r(x0) − central differences of exp|`` on SE(3)."""
    fd = jnp.stack(
        [
            SE3.vee(
                SE3.inverse(SE3.exp(x0)) @ (SE3.exp(x0 + h * e) - SE3.exp(x0 - h * e)) / (2 * h)
            )
            for e in jnp.eye(6, dtype=x0.dtype)
        ],
        -1,
    )
    return jnp.max(jnp.abs(SE3.jac_right(x0) - fd))


def _logs_near_pi(thetas, axis):
    R = SO3.exp(thetas[:, None] * axis)
    return SO3.log(R), naive_so3_log(R)


def _log_exp_jacobian_error(w):
    return jnp.max(jnp.abs(jax.jacfwd(lambda w: SO3.log(SO3.exp(w)))(w) - jnp.eye(3)))


def run(out: Path, fast: bool) -> list[Check]:
    n = 2_000 if fast else 100_000
    key = jax.random.PRNGKey(0)
    checks = []
    for G in (SO3, SE3, SO2, SE2):
        err = jax.jit(_roundtrip_error, static_argnums=(0, 2))(G, key, n)
        checks.append(
            Check(
                f"{G.name}: max |exp(log g) - g| over {n} random g", float(err), 1e-12, "identity"
            )
        )

    xi = 0.8 * jax.random.normal(key, (64, 6))
    err = jax.jit(_expm_error)(xi)
    checks.append(Check("SE3: max |exp(xi) - expm(hat xi)|", float(err), 1e-12, "Padé expm"))

    # right Jacobian against central finite differences of exp
    x0 = jnp.array([0.3, -1.2, 0.7, 0.5, 0.1, -0.4])
    checks.append(
        Check(
            "SE3: |J_r(xi) - finite differences|",
            float(jax.jit(_jac_right_error)(x0, 1e-6)),
            1e-8,
            "central FD",
        )
    )

    # accuracy and derivatives near θ = π
    axis = jnp.array([2.0, -1.0, 2.0]) / 3.0
    gaps = np.logspace(-12, 0, 49)
    thetas = np.pi - gaps
    log_gj, log_naive = jax.jit(_logs_near_pi)(jnp.asarray(thetas), axis)
    err_gj = np.linalg.norm(np.asarray(log_gj) - thetas[:, None] * np.asarray(axis), axis=-1)
    err_naive = np.linalg.norm(np.asarray(log_naive) - thetas[:, None] * np.asarray(axis), axis=-1)
    checks.append(
        Check(
            "SO3: max |log(exp w) - w| for pi - |w| in [1e-12, 1]",
            float(err_gj.max()),
            1e-12,
            "identity",
        )
    )
    jac_err = jax.jit(_log_exp_jacobian_error)
    d_err = max(float(jac_err(t * axis)) for t in (0.0, np.pi - 1e-6))
    checks.append(
        Check("SO3: |d/dw log(exp w) - I| at |w| = 0 and pi - 1e-6", d_err, 1e-8, "identity")
    )

    _plot(out, gaps, err_gj, err_naive)
    return checks


def _plot(out: Path, gaps, err_gj, err_naive) -> None:
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(11, 4.5))
    ax = fig.add_subplot(1, 2, 1, projection="3d")
    xi = jnp.array([0.4, 1.1, 0.7])
    ts = np.linspace(0, 2.0, 12)
    for t in ts:
        R = np.asarray(SO3.exp(t * xi))
        origin = np.array([t, 0.0, 0.0]) * 1.2
        for k, c in enumerate(("tab:red", "tab:green", "tab:blue")):
            ax.quiver(*origin, *(0.5 * R[:, k]), color=c, linewidth=1.2)
    ax.set_title("one-parameter subgroup exp(t ξ) on SO(3)\n(body frames, shifted along x)")
    ax.set_xlim(0, 3), ax.set_ylim(-1, 1), ax.set_zlim(-1, 1)
    ax.set_box_aspect((3, 2, 2))
    ax2 = fig.add_subplot(1, 2, 2)
    ax2.loglog(
        gaps, np.maximum(err_naive, 1e-17), "o-", ms=3, label="textbook θ/(2 sin θ)·vee(R − Rᵀ)"
    )
    ax2.loglog(gaps, np.maximum(err_gj, 1e-17), "s-", ms=3, label="geomjax SO3.log (quaternion)")
    ax2.set_xlabel("π − θ")
    ax2.set_ylabel("|log(exp ω) − ω|")
    ax2.set_title("logarithm accuracy near θ = π (float64)")
    ax2.legend()
    ax2.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "lie_groups.png", dpi=120)
    plt.close(fig)
