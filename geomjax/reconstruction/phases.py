"""Reconstruction, holonomy and geometric/dynamic phases (Cabrera, *Base-controlled mechanical systems and geometric phases*, §4, App. 7).

Orientation of the solid angle (the paper never defines it; pinned numerically in
``tests/reconstruction/test_phases.py``): :func:`solid_angle` is positive for a loop that turns
counterclockwise about the outward normal of the region it encloses (right-hand rule), e.g.
``+2π(1 − cos α)`` for the circle of colatitude ``α`` about ``+z`` traversed with increasing
longitude.  With this orientation, for a closed loop of the body momentum ``Π(t)`` on the sphere
``|Π| = |μ|`` the geometric phase of :func:`so3_phases` is ``θ_G = −Ω[Π]`` (mod 2π) — Montgomery's
rigid-body formula ``Δθ = 2ET/|μ| − Ω`` and the paper's §5.4 statement "minus the signed solid
angle".
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from .._internal.eager import top_level_options
from .._internal.tracing import is_traced
from ..integrators.simulate import Solution, simulate
from ..lie.so3 import SO3
from .core import BaseControlledSystem, Reconstruction, _check_curve_arity, saddle_solve
from .methods import GAUSS_NODES, HorizontalLift, MomentumLGVI, magnus4_update

__all__ = ["holonomy", "nonholonomic_phases", "reconstruct", "so3_phases", "solid_angle"]


def reconstruct(
    recon: Reconstruction,
    t_final,
    steps: int,
    *,
    g0=None,
    momentum=None,
    spatial: bool = False,
    method=None,
    t0=0.0,
    save_every: int = 1,
) -> Solution:
    """Solve for ``g(t)`` on ``[t0, t_final]`` given the base curve of ``recon``.

    Arguments:
        recon: a :class:`Reconstruction` (system + base curve [+ params, gauge]).
        t_final: final time; ``steps`` fixed steps of ``(t_final − t0)/steps``.
        g0, momentum, spatial: initial data, see :meth:`Reconstruction.state` (default: identity
            and zero free momentum).
        method: :class:`MomentumLGVI` (default), :class:`ReconstructionRKMK4` or
            :class:`HorizontalLift`.

    Returns the :class:`geomjax.Solution` (states ``(g, Π)``); the physical configuration is
    ``recon.configuration(state, t)``.
    """
    if not isinstance(recon, Reconstruction):
        raise ValueError("reconstruct: argument 'recon' must be a Reconstruction")
    method = MomentumLGVI() if method is None else method
    state0 = recon.state(g0, momentum, t=t0, spatial=spatial)
    return _run(recon, method, state0, t_final, t0, steps, save_every)


def _run_program(recon, method, state0, t_final, t0, steps, save_every):
    dt = (jnp.asarray(t_final, state0.mu.dtype) - t0) / steps
    return simulate(recon, method, state0, dt, steps, save_every=save_every, t0=t0)


# an eager call compiles with XLA:CPU's small-loop threshold raised for this program alone
_run = top_level_options(_run_program, small_loops=True)


def _flat(q):
    return jnp.concatenate([jnp.ravel(x) for x in jax.tree_util.tree_leaves(q)])


def holonomy(
    system: BaseControlledSystem,
    loop,
    period,
    steps: int = 256,
    *,
    params=None,
    momentum=None,
    spatial: bool = False,
    method=None,
    gauge=None,
    tol: float = 1e-8,
):
    """The group element ``g(T)`` (``g(0) = e``) after the closed base loop ``loop`` on
    ``[0, period]``: ``c(T) = g(T)·c(0)`` for the trivial gauge.

    Geometric (independent of the time law of the loop) when the induced motion is a horizontal
    lift: zero momentum or purely kinematic constraints (Prop. 4.12); the default method is then
    :class:`HorizontalLift`.  With ``momentum`` given, :class:`MomentumLGVI` is used and the result
    is the full (dynamic × geometric) phase.

    ``loop``: ``t -> (base_dim,)`` or ``(params, t) -> (base_dim,)``.  Raises ``ValueError``
    (``equinox.error_if`` under ``jit``/``vmap``) if the loop is not closed, i.e. if the gauge
    points ``section(loop(0))`` and ``section(loop(period))`` differ by more than ``tol``
    (relative), or if the result is not finite.
    """
    _check_curve_arity(loop, params, "holonomy", "loop")
    recon = Reconstruction(system, loop, params=params, gauge=gauge)
    dtype = jnp.result_type(float)
    T = jnp.asarray(period, dtype)
    a, b = _flat(recon.gauge_point(jnp.zeros((), dtype))), _flat(recon.gauge_point(T))
    gap = jnp.max(jnp.abs(a - b)) / (1.0 + jnp.max(jnp.abs(a)))
    msg = (
        f"holonomy: argument 'loop' is not closed: the gauge points at t=0 and t=period differ "
        f"(relative gap > tol={tol:g})"
    )
    if is_traced(gap):
        T = eqx.error_if(T, ~(gap <= tol), msg)
    elif not bool(gap <= tol):
        raise ValueError(f"{msg}; gap {float(gap):.3g}")
    if method is None:
        method = HorizontalLift() if momentum is None else MomentumLGVI()
    sol = reconstruct(recon, T, steps, momentum=momentum, spatial=spatial, method=method)
    g = sol.states.g[-1]
    bad = ~jnp.all(jnp.isfinite(g))
    emsg = "holonomy: non-finite result (check argument 'loop' and its parameters)"
    if is_traced(bad):
        return eqx.error_if(g, bad, emsg)
    if bool(bad):
        raise ValueError(emsg)
    return g


def solid_angle(points) -> jax.Array:
    """Signed solid angle enclosed by the closed polygon ``points`` ``(N, 3)`` (any nonzero
    radius; the polygon closes from the last point back to the first).

    Sum of the signed spherical triangles ``(n, p_i, p_{i+1})`` with ``n`` the normalized mean of
    the points (Van Oosterom–Strackee), so the loop must not enclose ``−n``'s antipode region
    ambiguously (any loop inside an open hemisphere is fine).  Positive for counterclockwise
    circulation about the enclosed region's outward normal (see the module docstring).
    Differentiable.
    """
    p = jnp.asarray(points)
    if p.ndim != 2 or p.shape[1] != 3:
        raise ValueError(f"solid_angle: argument 'points' must have shape (N, 3), got {p.shape}")
    u = p / jnp.linalg.norm(p, axis=1, keepdims=True)
    c = jnp.sum(u, axis=0)
    n = c / jnp.linalg.norm(c)
    a, b = u, jnp.roll(u, -1, axis=0)
    num = jnp.einsum("j,ij->i", n, jnp.cross(a, b))
    den = 1.0 + a @ n + b @ n + jnp.sum(a * b, axis=1)
    return 2.0 * jnp.sum(jnp.arctan2(num, den))


def so3_phases(recon: Reconstruction, solution: Solution, frame=None) -> dict[str, jax.Array]:
    """Dynamic/geometric factorization ``g(t) = h_D(t)·g_G(t)`` on SO(3) (§4.2, eqs. 42–44,
    App. 7) for a solution with conserved spatial momentum ``μ ≠ 0``.

    ``h_D(t) = exp(θ_D(t) u)`` with ``u = μ/|μ|`` is the dynamic phase,
    ``θ̇_D = ⟨Π, ξ⟩/|μ|`` (eq. 42 with the Ad-invariant projection ``P = u uᵀ``; in a mechanical
    gauge ``⟨Π, ξ⟩ = 2K − 2K_int``, eq. 44), integrated by the trapezoidal rule on the saved
    states; ``g_G = h_D⁻¹ g`` is the horizontal lift of ``Π(t)`` for the connection of ``P``
    (``g_Gᵀ μ = Π`` and ``u·(ġ_G g_Gᵀ)^∨ = 0``).  For a closed ``Π`` loop,
    ``g_G(T) g_G(0)ᵀ = exp(θ_G u)`` with ``θ_G = −solid_angle(Π)`` (mod 2π).

    ``frame``: for a momentum that is not conserved but transported by a known rotation,
    ``μ(t) = h_M(t) μ(0)`` (the magnetic body of §5.4: ``h_M(t) = exp(t ω̂_l)``), a jittable
    ``t -> h_M(t)``; the factorization is then ``g = h_M h_D g_G`` with ``R_M = h_M⁻¹ g`` and
    ``θ̇_D = ⟨Π, ξ − gᵀω_M⟩/|μ(0)|``, ``ω_M = (ḣ_M h_Mᵀ)^∨`` (§5.4; in a mechanical gauge
    ``⟨Π, I⁻¹Π⟩ − ⟨J, ω_l⟩``).

    Returns a dict: ``axis`` ``(3,)``, ``theta_dynamic`` ``(N,)``, ``h_dynamic`` ``(N, 3, 3)``,
    ``g_geometric`` ``(N, 3, 3)``, ``mu`` ``(N, 3)`` (spatial momentum at each saved state).
    """
    if not (isinstance(recon, Reconstruction) and recon.group.name == "SO3"):
        raise ValueError("so3_phases: argument 'recon' must be a Reconstruction on SO(3)")
    if frame is not None and not callable(frame):
        raise ValueError("so3_phases: argument 'frame' must be a function t -> rotation or None")
    return _so3_phases(recon, solution, frame)


@eqx.filter_jit
def _so3_phases(recon, solution, frame):
    g, mu = solution.states.g, solution.states.mu
    ts = solution.times
    mus = jnp.einsum("nij,nj->ni", g, mu)
    m0 = mus[0]
    nm = jnp.linalg.norm(m0)
    u = m0 / nm
    xi = jax.vmap(recon.velocity)(mu, ts)
    if frame is not None:

        def omega(t):
            H, Hd = jax.jvp(frame, (t,), (jnp.ones_like(t),))
            W = Hd @ H.T
            return 0.5 * jnp.stack([W[2, 1] - W[1, 2], W[0, 2] - W[2, 0], W[1, 0] - W[0, 1]])

        hM = jax.vmap(frame)(ts)
        xi = xi - jnp.einsum("nji,nj->ni", g, jax.vmap(omega)(ts))
        g = jnp.einsum("nji,njk->nik", hM, g)
    rate = jnp.einsum("ni,ni->n", mu, xi) / nm
    dt = jnp.diff(ts)
    theta = jnp.concatenate(
        [jnp.zeros((1,), rate.dtype), jnp.cumsum(0.5 * dt * (rate[1:] + rate[:-1]))]
    )
    h = SO3.exp(theta[:, None] * u)
    gG = jnp.einsum("nji,njk->nik", h, g)
    return {"axis": u, "theta_dynamic": theta, "h_dynamic": h, "g_geometric": gG, "mu": mus}


def nonholonomic_phases(
    recon: Reconstruction, solution: Solution, *, closed: bool = False, tol: float = 1e-8
) -> dict[str, jax.Array]:
    """Geometric phase, dynamic phase and constraint (λ) contribution of a reconstructed motion
    with nonholonomic or affine constraints (Cabrera §4.1 and §4.4, eqs. 47–52, with the
    constraint-force term kept, §2.4.1 eq. 12)::

        g(t) = h_D(t) · h_λ(t) · g(t₀) · g_NH(t)                  (c(t) = g(t)·d₀(t))

    * ``g_NH`` — geometric phase: the horizontal lift of the base curve for the nonholonomic
      connection in the gauge of ``recon`` (``ġ_NH = g_NH ξ_lift``, ``C ξ_lift = r``,
      ``i*(I₀ξ_lift + J₀) = 0``; the affine part included), so ``g(t₀) g_NH(t)·d₀(t)`` is the
      nonholonomic gauge ``d₀^NH`` (eq. 16) and, for a closed base loop in the trivial gauge,
      ``g_NH(T)`` is its holonomy (§4.1, the ``g_G^NH`` of the §4.4 corollary).
    * ``h_D`` — dynamic phase: eq. (52) with the initial spatial momentum ``μ₀ = J(ċ(t₀))``,
      ``ḣ_D h_D⁻¹ = Ad_g K(t) Ad_gᵀ μ₀`` with ``K = (i*I₀ i)⁻¹ i*`` the inverse locked inertia on
      ``g^{d₀} = ker C`` (``K(t)x``: the ``ξ`` of ``[[I₀, Cᵀ], [C, 0]] [ξ; y] = [x; 0]``), i.e.
      ``(I^{g^c}_{c(t)})⁻¹ i*_c μ₀`` seen along the physical motion.  It is the motion the free
      momentum would drive if the constraint forces did no work on it
      (``Π_free = Ad_gᵀμ₀`` solves ``Π̇ = (ad_ξ)ᵀΠ``, eq. 11 without ``Cᵀλ``).
    * ``h_λ`` — constraint contribution: the rest, driven by the momentum the constraint forces
      deliver, ``Λ(t) = ∫ Ad_{g⁻¹}ᵀ (Cᵀλ + τ) dt`` (``J(ċ(t)) = μ₀ + Λ(t)``; ``τ`` an external
      body torque, e.g. the §4.5 dipolar torque, counted with the constraint forces as the paper
      counts it among the affine constraints), ``ḣ_λ h_λ⁻¹ = Ad_{h_D⁻¹} Ad_g K Ad_gᵀ Λ``.  For
      ``D = TQ`` ``h_λ ≡ e`` and ``h_D`` is the §4.1 ``g_Dyn``; with full horizontal symmetries
      (``g^q = h`` constant, §4.4) ``i*Λ = 0`` and again ``h_λ ≡ e``.  For an abelian group the
      factors add: ``g = h_D + h_λ + g(t₀) + g_NH``.

    ``g_NH`` is integrated by the fourth-order Magnus step on the saved grid (``ξ_lift`` at the
    Gauss points); ``Λ`` by the trapezoidal rule and ``h_D``, ``h_λ`` by the trapezoidal
    exponential rule ``h_{k+1} = exp(Δt/2 (w_k + w_{k+1})) h_k`` on the saved states (second
    order: save every step).  ``composed`` ``= h_D h_λ g(t₀) g_NH`` equals the solution's ``g``
    to that accuracy (and ``μ₀ + Λ`` its spatial momentum).

    Arguments:
        recon: the :class:`Reconstruction` that produced ``solution`` (any gauge).
        solution: its :class:`geomjax.Solution` (``reconstruct``; states ``(g, Π)``).
        closed: also return ``holonomy = g_NH(T)``, checking that the base curve is closed
            (``|c̃(t_end) − c̃(t₀)| ≤ tol (1 + |c̃(t₀)|)``; ``ValueError``, or
            ``equinox.error_if`` under ``jit``).

    Returns a dict of arrays over the ``N`` saved times: ``g_geometric``, ``h_dynamic``,
    ``h_constraint``, ``composed`` ``(N, *element_shape)``; ``mu`` (spatial momentum
    ``J(ċ)``), ``constraint_impulse`` ``Λ``, ``constraint_torque`` ``Ad_{g⁻¹}ᵀ(Cᵀλ + τ)``
    ``(N, n)``; ``multiplier`` ``λ`` ``(N, m)``; with ``closed``, ``holonomy``.
    """
    where = "nonholonomic_phases"
    if not isinstance(recon, Reconstruction):
        raise ValueError(f"{where}: argument 'recon' must be a Reconstruction")
    states = getattr(solution, "states", None)
    if not (isinstance(solution, Solution) and hasattr(states, "g") and hasattr(states, "mu")):
        raise ValueError(
            f"{where}: argument 'solution' must be the Solution of reconstruct(recon, ...) "
            "(states (g, mu))"
        )
    G = recon.group
    n_t = jnp.shape(solution.times)
    if (
        len(n_t) != 1
        or n_t[0] < 2
        or jnp.shape(states.mu) != (n_t[0], G.dim)
        or jnp.shape(states.g) != (n_t[0], *G.element_shape)
    ):
        raise ValueError(
            f"{where}: argument 'solution' must hold N >= 2 saved states of {G.name} with "
            f"momenta (N, {G.dim}); got ts {n_t}, g {jnp.shape(states.g)}, mu {jnp.shape(states.mu)}"
        )
    gap = None
    if closed:
        ts = solution.times
        b0, b1 = recon.base(ts[0]), recon.base(ts[-1])
        gap = jnp.max(jnp.abs(b1 - b0), initial=0.0) / (1.0 + jnp.max(jnp.abs(b0), initial=0.0))
        msg = (
            f"{where}: closed=True but the base curve of argument 'recon' is not closed over "
            f"the times of argument 'solution' (relative gap > tol={tol:g})"
        )
        if not is_traced(gap) and not bool(gap <= tol):
            raise ValueError(f"{msg}; gap {float(gap):.3g}")
    out = _nh_phases(recon, solution)
    if closed:
        hol = out["g_geometric"][-1]
        if is_traced(gap):
            hol = eqx.error_if(hol, ~(gap <= tol), msg)
        out["holonomy"] = hol
    return out


@eqx.filter_jit
def _nh_phases(recon, solution):
    G = recon.group
    ts, gs, pis = solution.times, solution.states.g, solution.states.mu
    N = ts.shape[0]
    dts = jnp.diff(ts)
    # the gauge quantities at the nodes and at the Gauss points of each interval, in one
    # vmapped evaluation (a single copy in the program)
    tg = ts[:-1, None] + dts[:, None] * jnp.asarray(GAUSS_NODES, ts.dtype)[None, :]
    rates = jax.vmap(recon.coefficient_rates)(jnp.concatenate([ts, tg.reshape(-1)]))
    at_nodes = jax.tree_util.tree_map(lambda x: x[:N], rates)
    co_g = jax.tree_util.tree_map(lambda x: x[N:], rates[0])
    xl = jax.vmap(lambda c: saddle_solve(c.I0, c.C, -c.J0, c.r)[0])(co_g).reshape(N - 1, 2, -1)

    def node(t, g, pi, rate):
        _, _, lam, co = recon._forces(t, recon.make_state(g, pi), rates=rate)
        force = co.C.T @ lam if co.C.shape[0] else jnp.zeros_like(pi)
        tau = recon.body_torque(t, g, pi)
        if tau is not None:
            force = force + tau
        to_spatial = jnp.swapaxes(G.Ad(G.inverse(g)), -1, -2)
        return to_spatial @ force, to_spatial @ pi, lam, co.I0, co.C

    Gam, mus, lam, I0, C = jax.vmap(node)(ts, gs, pis, at_nodes)
    Lam = jnp.concatenate(
        [jnp.zeros_like(Gam[:1]), jnp.cumsum(0.5 * dts[:, None] * (Gam[1:] + Gam[:-1]), 0)]
    )

    def spatial_rate(g, I, Cm, m):  # Ad_g K Ad_gᵀ m
        A = G.Ad(g)
        x = saddle_solve(I, Cm, A.T @ m, jnp.zeros((Cm.shape[0],), m.dtype))[0]
        return A @ x

    wD = jax.vmap(spatial_rate, (0, 0, 0, None))(gs, I0, C, mus[0])
    wL = jax.vmap(spatial_rate)(gs, I0, C, Lam)

    e = G.identity(dtype=pis.dtype)

    def step(carry, k):
        gnh, hD, hL = carry
        gnh1 = magnus4_update(G, gnh, xl[k, 0], xl[k, 1], dts[k], "left")
        hD1 = G.compose(G.exp(0.5 * dts[k] * (wD[k] + wD[k + 1])), hD)
        a0 = G.Ad(G.inverse(hD)) @ wL[k]
        a1 = G.Ad(G.inverse(hD1)) @ wL[k + 1]
        hL1 = G.compose(G.exp(0.5 * dts[k] * (a0 + a1)), hL)
        return (gnh1, hD1, hL1), (gnh1, hD1, hL1)

    _, (gnh, hD, hL) = jax.lax.scan(step, (e, e, e), jnp.arange(N - 1))
    cat = lambda x: jnp.concatenate([e[None], x])  # noqa: E731
    gnh, hD, hL = cat(gnh), cat(hD), cat(hL)
    comp = jax.vmap(lambda a, b, c: G.compose(G.compose(a, b), G.compose(gs[0], c)))(hD, hL, gnh)
    return {
        "g_geometric": gnh,
        "h_dynamic": hD,
        "h_constraint": hL,
        "composed": comp,
        "mu": mus,
        "constraint_impulse": Lam,
        "constraint_torque": Gam,
        "multiplier": lam,
    }
