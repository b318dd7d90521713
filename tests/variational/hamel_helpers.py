"""Systems in mobile frames and their independent references for the Hamel tests.

The references are written by hand, without geomjax: Euler's angular-velocity formulas for
the ZXZ Euler angles, the Euler–Poisson equations of a heavy top (NumPy, solved by SciPy DOP853
at rtol = atol = 1e-12) and the frame of a rolling disk."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import geomjax as gj

INERTIA = np.array([1.0, 2.0, 3.0])
#: m g χ: the weight times the centre of mass in the body frame (V = m g ⟨χ, Γ⟩)
MGCHI = np.array([0.3, -0.2, 1.0])


def euler_frame(q):
    """``A(q)``: body angular velocity ``Ω = A(q) q̇`` for ZXZ Euler angles ``q = (φ, θ, ψ)``,
    ``R = R_z(φ) R_x(θ) R_z(ψ)`` (Euler's kinematic equations; singular at ``sin θ = 0``)."""
    _, th, ps = q
    s, c = jnp.sin(th), jnp.cos(th)
    z, o = jnp.zeros_like(th), jnp.ones_like(th)
    return jnp.stack(
        [
            jnp.stack([s * jnp.sin(ps), jnp.cos(ps), z]),
            jnp.stack([s * jnp.cos(ps), -jnp.sin(ps), z]),
            jnp.stack([c, z, o]),
        ]
    )


def gamma(q):
    """``Γ = Rᵀ e_z``, the vertical in the body frame."""
    _, th, ps = q
    return jnp.stack([jnp.sin(th) * jnp.sin(ps), jnp.sin(th) * jnp.cos(ps), jnp.cos(th)])


def heavy_top(force=None):
    """The heavy top in Euler angles with the body angular velocity as quasi-velocities."""
    chi = jnp.asarray(MGCHI)
    return gj.HamelSystem(
        metric=jnp.diag(jnp.asarray(INERTIA)),
        potential=lambda q: chi @ gamma(q),
        frame=euler_frame,
        force=force,
    )


def euler_poisson_rhs(damping=0.0):
    """Euler–Poisson equations ``I Ω̇ = IΩ × Ω + Γ × mgχ − c Ω``, ``Γ̇ = Γ × Ω`` (NumPy)."""

    def rhs(t, y):
        W, G = y[:3], y[3:]
        dW = (np.cross(INERTIA * W, W) + np.cross(G, MGCHI) - damping * W) / INERTIA
        return np.concatenate([dW, np.cross(G, W)])

    return rhs


# --- the vertical rolling disk in a constraint-adapted frame ---------------------------------
DISK = dict(mass=1.0, radius=0.7, inertia=0.5, inertia_vertical=0.25)


def disk_frame_vectors(q):
    """``q = (x, y, θ, φ)``; columns: rolling ``(R cos φ, R sin φ, 1, 0)``, turning ``∂_φ``,
    then ``∂_x``, ``∂_y`` (so that ``v_2 = ẋ − R cos φ θ̇`` and ``v_3 = ẏ − R sin φ θ̇``, the
    slip velocities, are the constrained quasi-velocities)."""
    R = DISK["radius"]
    ph = q[3]
    z, o = jnp.zeros_like(ph), jnp.ones_like(ph)
    return jnp.stack(
        [
            jnp.stack([R * jnp.cos(ph), z, o, z]),
            jnp.stack([R * jnp.sin(ph), z, z, o]),
            jnp.stack([o, z, z, z]),
            jnp.stack([z, o, z, z]),
        ]
    )


def rolling_disk():
    """``ℓ(q, v) = L(q, E(q) v)`` with the Lagrangian of the disk in coordinates."""
    m, I, J = DISK["mass"], DISK["inertia"], DISK["inertia_vertical"]

    def ell(q, v):
        qd = disk_frame_vectors(q) @ v
        return 0.5 * (m * (qd[0] ** 2 + qd[1] ** 2) + I * qd[2] ** 2 + J * qd[3] ** 2)

    return gj.HamelSystem(ell, frame_vectors=disk_frame_vectors, constrained=(2, 3), dim=4)


def run(system, method, state0, dt, n, e_ref=None):
    """``n`` steps of ``method.step`` (``dt`` and ``n`` dynamic: one compilation per
    system/method for every step size); returns ``(final state, max residual, max |E − e_ref|)``
    with ``e_ref`` the initial energy by default."""
    dtype = state0.q.dtype
    if e_ref is None:
        e_ref = system.energy(state0)
    return _run(system, method, state0, jnp.asarray(dt, dtype), jnp.asarray(n), e_ref)


@eqx.filter_jit
def _run(system, method, state0, dt, n, e_ref):
    def body(i, c):
        s, worst, de = c
        s1, stats = method.step(system, s, dt, None, i * dt)
        de = jnp.maximum(de, jnp.abs(system.energy(s1) - e_ref))
        return s1, jnp.maximum(worst, stats.residual), de

    zero = jnp.zeros((), dt.dtype)
    return jax.lax.fori_loop(0, n, body, (state0, zero, zero))
