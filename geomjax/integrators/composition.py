"""Higher order by composition of a symmetric one-step method (Yoshida 1990; Suzuki 1990;
Kahan & Li 1997; Hairer, Lubich & Wanner, *Geometric Numerical Integration*, §II.4 and §V.3).

If ``Φ_h`` is a symmetric method of order 2 (``Φ_{−h} ∘ Φ_h = id``), the composition

    Ψ_h = Φ_{γ_s h} ∘ … ∘ Φ_{γ_2 h} ∘ Φ_{γ_1 h},      γ_i = γ_{s+1−i}  (palindromic),

is symmetric again and has order ``p`` when the ``γ_i`` satisfy the order conditions
(``Σ γ_i = 1``, ``Σ γ_i³ = 0`` for order 4; in addition ``Σ γ_i⁵ = 0`` and one condition on a
bracket of order 5 for order 6; HLW §V.3.2).  Every stage is a step of the base method, so the
composed method keeps whatever the base method preserves exactly: the configuration stays on the
group, momentum maps and Casimirs stay at round-off, nonholonomic constraints hold at every node,
symplecticity / Lie–Poisson structure are kept.

Schemes (coefficients ``γ_1..γ_s``, the rest by symmetry):

* ``"yoshida4"`` — the triple jump ``(γ, 1 − 2γ, γ)``, ``γ = 1/(2 − 2^{1/3})`` (3 stages, order 4);
* ``"suzuki4"`` — Suzuki's fractal ``(p, p, 1 − 4p, p, p)``, ``p = 1/(4 − 4^{1/3})`` (5 stages,
  order 4, an error constant ~50× smaller than the triple jump);
* ``"yoshida6"`` — Yoshida's solution A (7 stages, order 6);
* ``"kahan_li6"`` — Kahan & Li's ``s9odr6a`` (9 stages, order 6; HLW eq. (V.3.11)), error
  constant ~30× below ``"yoshida6"``;
* ``"kahan_li8"`` — Kahan & Li's ``s15odr8`` (15 stages, order 8).  For a base method with a large
  error constant (the LGVI's is ~35× the splitting's on the free body; at order 8 the gap grows:
  1e5× at dt 0.2) it is the cheapest plain composition to tight tolerances.

Cost (free body, T = 100, batch 1, float64, CPU time of the process,
``benchmarks/bench_work_precision.py --clock=cpu``, three runs on the shared 2-core CPU at load
5–10): an LGVI stage costs 100–135 ns — ~70–80 ns without the Legendre solve, ~20 ns per
scalar Newton iteration, two of them from the third-order predictor at these stage steps
(:func:`geomjax.integrators._so3_soa.cayley_solve_scalar`) — and a diffrax Tsit5 step
0.45–0.5 µs.  Time to reach an error, over Tsit5's: ``"kahan_li8"`` 2.2–2.7× at 1e-8, 1.65–1.75×
at 1e-10 (``"kahan_li6"`` 3.2–3.4× at 1e-8); the processed compositions of
:class:`ProcessedComposition` go further with fewer stages for the same error (stages to reach
1e-8 / 1e-10: ``"kahan_li8"`` 11 100 / 19 900, ``"bcm8"`` 7 300 / 13 100, ``"bcm10"``
6 200 / 9 900): ``"bcm10"`` 1.43–1.68× at 1e-8, 1.0–1.05× at 1e-10 (``"bcm8"`` 1.8–2.1×, 1.2–1.6×).  What bounds it: Tsit5
needs ~1 140 steps for 1e-8 and ~2 900 for 1e-10, i.e. 5.4 and 3.4 LGVI stages of
``"bcm10"`` per Tsit5 step, so parity needs a stage of ≤ 90 ns at 1e-8 (≤ 150 ns at 1e-10).  The
explicit splitting (:class:`~geomjax.RigidBodySplitting`, error constant far smaller) with
``"kahan_li6"`` takes 0.88–1.15× at 1e-8, 0.8–1.1× at 1e-10.

Controls and time: a zero-order-hold control ``u_k`` acts on the whole step, so every stage sees
the same ``u_k`` (the composition then has order ``p`` for the exact flow with the piecewise-
constant control); stage ``i`` starts at ``t_k + (γ_1 + … + γ_{i−1}) h``, so time-dependent
constraints (a turntable) are evaluated at the right instants.  A velocity-dependent external force
(``system.force``) makes :class:`~geomjax.LGVI` and :class:`~geomjax.RigidBodySplitting` non-symmetric
(one explicit Heun-type correction): composition would stay second order, so it is refused.  The
coordinate variational methods (:class:`~geomjax.DiscreteEulerLagrange`, :class:`~geomjax.RATTLE`)
stay symmetric with forces (discrete Lagrange–d'Alembert forces placed symmetrically) and compose
with them; a composition of either is accepted by :class:`~geomjax.Impacts`.
"""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .base import AbstractMethod, GradientHooks, StepStats, gradient_hooks

__all__ = ["PROCESSED", "SCHEMES", "Composition", "ProcessedComposition"]


def _palindrome(half, middle=None):
    half = [float(g) for g in half]
    if middle is None:  # the middle coefficient makes the sum exactly one
        middle = 1.0 - 2.0 * sum(half)
    return (*half, middle, *half[::-1])


_C3 = 2.0 ** (1.0 / 3.0)
_P5 = 1.0 / (4.0 - 4.0 ** (1.0 / 3.0))

SCHEMES: dict[str, tuple[int, tuple[float, ...]]] = {
    "yoshida4": (4, _palindrome([1.0 / (2.0 - _C3)])),
    "suzuki4": (4, _palindrome([_P5, _P5])),
    # Yoshida (1990), Phys. Lett. A 150, Table 1, solution A (w3, w2, w1; w0 = 1 − 2 Σ)
    "yoshida6": (6, _palindrome([0.784513610477560, 0.235573213359357, -1.17767998417887])),
    # Kahan & Li (1997), Math. Comp. 66, s9odr6a; HLW (2006) eq. (V.3.11)
    "kahan_li6": (
        6,
        _palindrome(
            [
                0.39216144400731413927925056,
                0.33259913678935943859974864,
                -0.70624617255763935980996482,
                0.08221359629355080023149045,
            ]
        ),
    ),
    # Kahan & Li (1997), Math. Comp. 66, s15odr8 (15 stages, order 8)
    "kahan_li8": (
        8,
        _palindrome(
            [
                0.74167036435061295344822780,
                -0.40910082580003159399730010,
                0.19075471029623837995387626,
                -0.57386247111608226665638773,
                0.29906418130365592384446354,
                0.33462491824529818378495798,
                0.31529309239676659663205666,
            ]
        ),
    ),
}
"""Named composition schemes: name → (order, palindromic stage coefficients γ₁…γₛ).

``Composition(method, scheme)`` takes a name of this table or a tuple of coefficients."""


class _AbstractStages(GradientHooks, AbstractMethod):
    """What a method whose every stage is a step of ``method`` (:class:`Composition`,
    :class:`ProcessedComposition`) takes from it unchanged: the systems it supports, its
    initial states and their checks, its controls' shape and parameter checks, and the values
    plain reverse mode keeps of each stage."""

    method: eqx.AbstractVar[AbstractMethod]

    def supports(self, system) -> bool:
        return self.method.supports(system)

    def make_state(self, system, *args, **kwargs):
        """A consistent initial state: the inner method's ``make_state`` (e.g.
        :meth:`geomjax.RATTLE.make_state`, which projects onto the constraint) if it has one,
        else ``system.make_state``."""
        make = getattr(self.method, "make_state", None)
        if make is not None:
            return make(system, *args, **kwargs)
        return system.make_state(*args, **kwargs)

    def check_initial(self, system, state):
        return self.method.check_initial(system, state)

    def control_shape(self, system):
        # a stage's control is the base method's (e.g. actuator commands through Actuated)
        return self.method.control_shape(system)

    def validate(self, system) -> None:
        self.method.validate(system)

    def reverse_mode_saves(self, system, batched=False):
        # the base method's names, kept for every stage (GradientHooks.reverse_mode_saves;
        # figures: the architecture page, "Measured design choices")
        return gradient_hooks(self.method).reverse_mode_saves(system, batched=batched)

    def step(self, system, state, dt, control=None, t=0.0):
        carry, stats = self.advance(system, self.init(system, state, t), dt, control, t)
        return self.finalize(system, carry), stats


class Composition(_AbstractStages):
    """``Composition(method, scheme)``: a symmetric composition of a symmetric method (module
    docstring), e.g. ``Composition(LGVI(), "kahan_li6")`` — a sixth-order Lie group variational
    integrator.

    Arguments:
        method: a symmetric geomjax method (``method.symmetric``: :class:`~geomjax.LGVI`,
            :class:`~geomjax.RigidBodySplitting`, :class:`~geomjax.NonholonomicVI`,
            :class:`~geomjax.DiscreteEulerLagrange`, :class:`~geomjax.RATTLE`, or another
            ``Composition``).
        scheme: a name in :data:`SCHEMES` (default ``"suzuki4"``) or a palindromic tuple of
            coefficients ``γ_i`` summing to one (``order`` is then 2 unless given).
        order: the order of a custom ``scheme`` (ignored for named schemes).
        loop: how the stages run inside the step: ``"scan"`` (``jax.lax.scan`` over the
            coefficients: the base step is compiled once), ``"unroll"`` (a static loop: one XLA
            computation per step) or ``None`` (default): ``"scan"`` on CPU, ``"unroll"`` on
            accelerators.  On CPU the unrolled chain of stages ran slower per stage than the
            scan (XLA's CPU fusion recomputes elementwise producers in every consumer,
            as for the Newton iterations, :mod:`geomjax.integrators.newton`) and compiles in
            proportion to the number of stages; on accelerators the loop would cost a launch per
            stage.  Same arithmetic either way.

    ``Solution.stats["residual"]`` is the largest residual of the stages.
    """

    method: AbstractMethod
    scheme: str | tuple[float, ...] = eqx.field(static=True, default="suzuki4")
    custom_order: int | None = eqx.field(static=True, default=None)
    loop: str | None = eqx.field(static=True, default=None)
    symmetric: ClassVar[bool] = True

    def __init__(self, method, scheme="suzuki4", order=None, loop=None):
        if not isinstance(method, AbstractMethod):
            raise ValueError(
                f"Composition: argument 'method' must be a geomjax method, got {method!r}"
            )
        if not getattr(method, "symmetric", False):
            raise ValueError(
                f"Composition: argument 'method' must be a symmetric method (method.symmetric); "
                f"{type(method).__name__} is not, and composing it would not raise its order"
            )
        if isinstance(scheme, str):
            if scheme not in SCHEMES:
                raise ValueError(
                    f"Composition: argument 'scheme' must be one of {sorted(SCHEMES)} or a tuple "
                    f"of coefficients, got {scheme!r}"
                )
        else:
            gam = np.asarray(scheme, dtype=float)
            if gam.ndim != 1 or gam.size == 0 or not np.all(np.isfinite(gam)):
                raise ValueError(
                    f"Composition: argument 'scheme' must be a 1-d tuple of finite coefficients, got {scheme!r}"
                )
            if abs(gam.sum() - 1.0) > 1e-12 or np.max(np.abs(gam - gam[::-1])) > 1e-15:
                raise ValueError(
                    "Composition: the coefficients of argument 'scheme' must be palindromic and sum "
                    f"to one, got {scheme!r}"
                )
            scheme = tuple(float(g) for g in gam)
        if order is not None and not (isinstance(order, int) and order >= 2):
            raise ValueError(f"Composition: argument 'order' must be an int >= 2, got {order!r}")
        if loop not in (None, "unroll", "scan"):
            raise ValueError(
                f"Composition: argument 'loop' must be None, 'unroll' or 'scan', got {loop!r}"
            )
        self.loop = loop
        self.method = method
        self.scheme = scheme
        self.custom_order = order

    @property
    def coefficients(self) -> tuple[float, ...]:
        return SCHEMES[self.scheme][1] if isinstance(self.scheme, str) else self.scheme

    @property
    def order(self) -> int:  # type: ignore[override]
        if isinstance(self.scheme, str):
            return SCHEMES[self.scheme][0]
        return self.custom_order if self.custom_order is not None else 2

    @property
    def stages(self) -> int:
        return len(self.coefficients)

    @property
    def base(self) -> AbstractMethod:
        """The innermost (second-order) method of nested compositions."""
        m = self.method
        while isinstance(m, Composition):
            m = m.method
        return m

    @property
    def constraint(self):
        """The inner method's holonomic constraint ``g(q)`` (:class:`~geomjax.RATTLE`), else None."""
        return getattr(self.method, "constraint", None)

    def validate(self, system) -> None:
        self.method.validate(system)
        # DEL / RATTLE place their (velocity-dependent) forces symmetrically: they stay symmetric
        if getattr(system, "force", None) is not None and not getattr(
            self.base, "symmetric_with_force", False
        ):
            raise ValueError(
                "Composition: the system has a velocity-dependent external 'force'; the base step "
                "is then not symmetric and a composition would stay second order. Use the base "
                "method, or model the force as a control"
            )

    def init(self, system, state, t=0.0):
        return self.method.init(system, state, t)

    def finalize(self, system, carry):
        return self.method.finalize(system, carry)

    def carry_extra(self, system, carry):
        return self.method.carry_extra(system, carry)

    def resume(self, system, state, extra, t=0.0):
        return self.method.resume(system, state, extra, t)

    def carry_beyond_state(self, system=None) -> bool:
        return self.method.carry_beyond_state(system)

    def advance(self, system, carry, dt, control=None, t=0.0):
        loop = self.loop
        if loop is None:
            loop = "scan" if jax.default_backend() == "cpu" else "unroll"
        if loop == "scan":
            return self._advance_scan(system, carry, dt, control, t)
        worst = None
        elapsed = 0.0  # γ_1 + … + γ_{i−1}, a Python float: the stage times are t + elapsed·h
        for gamma in self.coefficients:
            carry, stats = self.method.advance(system, carry, gamma * dt, control, t + elapsed * dt)
            elapsed += gamma
            r = stats.residual
            # largest stage residual; NaN propagates so that a failed stage stays visible
            worst = r if worst is None else jnp.where(jnp.isnan(r), r, jnp.maximum(worst, r))
        return carry, StepStats(residual=worst)

    def _advance_scan(self, system, carry, dt, control, t):
        return _scan_stages(self.method, system, carry, dt, control, t, self.coefficients)


def _scan_stages(method, system, carry, dt, control, t, gam):
    """Steps of ``method`` of sizes ``γ_i dt`` in a ``lax.scan`` (stage ``i`` at time
    ``t + (γ_1 + … + γ_{i−1}) dt``): ``(carry, StepStats)``, the largest stage residual."""
    gam = np.asarray(gam)
    start = np.concatenate([[0.0], np.cumsum(gam)[:-1]])  # γ_1 + … + γ_{i−1}
    dtype = jnp.result_type(*jax.tree_util.tree_leaves(carry))

    def stage(c, coeffs):
        carry, worst = c
        g, e = coeffs
        carry, stats = method.advance(system, carry, g * dt, control, t + e * dt)
        r = stats.residual
        return (carry, jnp.where(jnp.isnan(r), r, jnp.maximum(worst, r))), None

    coeffs = (jnp.asarray(gam, dtype), jnp.asarray(start, dtype))
    (carry, worst), _ = jax.lax.scan(stage, (carry, jnp.zeros((), dtype)), coeffs)
    return carry, StepStats(residual=worst)


def _antisymmetric(half):
    """Processor coefficients ``(−g_1, …, −g_m, g_1, …, g_m)`` with ``g_1 = −(g_2 + … + g_m)``
    (``half`` gives ``g_2 … g_m``): they sum to zero, so ``P_h = id + O(h)``."""
    half = [float(g) for g in half]
    g = [-sum(half), *half]
    return (*(-x for x in g), *g)


PROCESSED: dict[str, tuple[int, tuple[float, ...], tuple[float, ...]]] = {
    # Blanes (2001), Appl. Numer. Math. 37: kernel of 7 stages, processor of 10
    "blanes6": (
        6,
        _palindrome([0.513910778424374, 0.364193022833858, -0.867423280969274]),
        _antisymmetric(
            [-0.461165940466494, -0.074332422810238, 0.384998538774070, 0.375012038697862]
        ),
    ),
    # Blanes, Casas & Murua (2006), SIAM J. Sci. Comput. 27: kernel of 13 stages, processor of 20
    "bcm8": (
        8,
        _palindrome(
            [
                0.168,
                0.168,
                0.585550530805562,
                -0.460090457516872,
                0.172863148729731,
                0.179664539695039,
            ]
        ),
        _antisymmetric(
            [
                -0.008488123494574411,
                -0.337188967354338,
                0.333987768164597,
                0.588351189003849,
                0.162324207599241,
                -0.511744926116413,
                0.236885952363384,
                0.598212975943381,
                -0.543415765371656,
            ]
        ),
    ),
    # Blanes, Casas & Murua (2006): kernel of 23 stages, processor of 24
    "bcm10": (
        10,
        _palindrome(
            [0.121657748919383] * 5
            + [
                -0.511318780154828,
                -0.172858614884985,
                0.123016258833066,
                0.441503951671565,
                -0.327071324165477,
                0.070952700957766,
            ]
        ),
        _antisymmetric(
            [
                0.4727142080578221,
                0.01344750613191108,
                -0.4637104712987078,
                -0.3045590922565247,
                -0.5382945821834320,
                -0.1899795533199732,
                0.1548256472553489,
                -0.3594148033156072,
                0.3430345669677392,
                0.5334030283695922,
                0.009116042043427756,
            ]
        ),
    ),
}
"""Processed schemes: name → (effective order, palindromic kernel coefficients, processor
coefficients ``p_1 … p_m``), for :class:`ProcessedComposition`."""


class ProcessedComposition(_AbstractStages):
    """``ProcessedComposition(method, scheme)``: a symmetric composition with processing
    (Butcher 1969; López-Marcos, Sanz-Serna & Skeel 1996; Blanes, Casas & Ros, "Symplectic
    integration with processing: a general study", SIAM J. Sci. Comput. 21 (1999); Blanes,
    Casas & Murua, "Composition methods for differential equations with processing", SIAM J.
    Sci. Comput. 27 (2006); HLW §V.3.4).

    The kernel ``K_h = Φ_{γ_s h} ∘ … ∘ Φ_{γ_1 h}`` (palindromic, as :class:`Composition`) runs
    every step, and a processor ``P_h`` is applied at the output times only:

        y_n = P_h ∘ K_h^n ∘ P_h^{-1} (y_0),     P_h^{-1} = Φ_{p_m h} ∘ … ∘ Φ_{p_1 h},
                                                P_h = Φ_{−p_1 h} ∘ … ∘ Φ_{−p_m h}

    (``Φ_{−τ} = Φ_τ^{-1}`` for the symmetric base method).  ``P_h K_h P_h^{-1}`` has order ``p``
    (the *effective* order of the kernel) although ``K_h`` alone does not: the processor
    removes the error terms of the kernel that are a conjugation, so the kernel reaches order
    ``p`` with fewer stages, or smaller error constants, than a plain composition.  Every
    stage is a step of the base method, so each step keeps what the base method keeps (group,
    momentum maps, Casimirs, symplecticity of ``K_h``).

    Schemes (:data:`PROCESSED`): ``"blanes6"`` (kernel of 7 stages, effective order 6);
    ``"bcm8"`` (13 stages, order 8), ``"bcm10"`` (23 stages, order 10).
    ``geomjax bench work-precision`` compares them with the plain compositions.

    The carry is ``(kernel variable z = P_h^{-1}(y), h)``: :meth:`init` sets ``h = 0``
    (``z = y``), the first :meth:`advance` (and one with a different ``dt``) applies
    ``P_dt^{-1}`` (after ``P_h`` for ``h ≠ 0``; a ``lax.cond`` on ``h == dt``, one scalar
    branch per step), :meth:`finalize` applies ``P_h``.  So in :func:`geomjax.simulate` the
    processor runs once per saved state; a run continued from a saved state agrees with the
    uninterrupted one to round-off (``P^{-1}(P(z)) = z`` to round-off), not bitwise.  The
    residuals of ``P^{-1}``'s stages are part of the step's ``StepStats``; those of ``P``'s are
    not reported (they are stages of the same sizes as the kernel's).

    For autonomous systems: a control would change the kernel from step to step, and the
    processor, which conjugates one fixed kernel, would no longer cancel (``ValueError``).  Not
    symmetric as a whole (``ReversibleAdjoint`` refuses it; use the plain
    :class:`Composition` there), and not composable again.
    Plain reverse mode through :func:`geomjax.simulate` keeps of every stage (kernel and
    processor) what the base method keeps of its step (``reverse_mode_saves``, as
    :class:`Composition`).

    Arguments:
        method: a symmetric geomjax method (as for :class:`Composition`).
        scheme: a name in :data:`PROCESSED` (default ``"bcm8"``).
        loop: the kernel's stage loop (:class:`Composition`'s ``loop``).
    """

    method: AbstractMethod
    scheme: str = eqx.field(static=True, default="bcm8")
    loop: str | None = eqx.field(static=True, default=None)
    symmetric: ClassVar[bool] = False

    def __init__(self, method, scheme="bcm8", loop=None):
        if not isinstance(scheme, str) or scheme not in PROCESSED:
            raise ValueError(
                f"ProcessedComposition: argument 'scheme' must be one of {sorted(PROCESSED)}, "
                f"got {scheme!r}"
            )
        # the checks of 'method' and 'loop' are Composition's
        Composition(method, PROCESSED[scheme][1], order=PROCESSED[scheme][0], loop=loop)
        self.method = method
        self.scheme = scheme
        self.loop = loop

    @property
    def order(self) -> int:  # type: ignore[override]
        return PROCESSED[self.scheme][0]

    @property
    def kernel(self) -> Composition:
        """The kernel ``K_h`` as a :class:`Composition` (its own order is lower)."""
        return Composition(self.method, PROCESSED[self.scheme][1], loop=self.loop)

    @property
    def processor(self) -> tuple[float, ...]:
        """``p_1 … p_m``: ``P_h^{-1}`` is the base step with ``p_1 h``, then ``p_2 h``, …"""
        return PROCESSED[self.scheme][2]

    @property
    def stages(self) -> int:
        """Stages of the kernel (base steps per step)."""
        return len(PROCESSED[self.scheme][1])

    @property
    def base(self) -> AbstractMethod:
        return self.kernel.base

    def validate(self, system) -> None:
        self.kernel.validate(system)

    def init(self, system, state, t=0.0):
        inner = self.method.init(system, state, t)
        dtype = jnp.result_type(*jax.tree_util.tree_leaves(inner))
        return inner, jnp.zeros((), dtype)

    def _post(self, system, inner, h):
        """``P_h`` (identity for ``h = 0``)."""
        post = tuple(-p for p in self.processor[::-1])

        def apply(inner):
            return _scan_stages(self.method, system, inner, h, None, 0.0, post)[0]

        return jax.lax.cond(h == 0, lambda inner: inner, apply, inner)

    def finalize(self, system, carry):
        inner, h = carry
        return self.method.finalize(system, self._post(system, inner, h))

    def advance(self, system, carry, dt, control=None, t=0.0):
        if control is not None:
            raise ValueError(
                "ProcessedComposition: controls are not supported (the processor conjugates one "
                "fixed kernel; a control changes it from step to step). Use Composition"
            )
        inner, h = carry
        dt = jnp.asarray(dt, h.dtype)

        def reprocess(inner):  # P_dt^{-1} ∘ P_h: the kernel variable for the step dt
            inner = self._post(system, inner, h)
            inner, stats = _scan_stages(self.method, system, inner, dt, None, t, self.processor)
            return inner, stats.residual

        inner, r0 = jax.lax.cond(
            h == dt, lambda inner: (inner, jnp.zeros((), h.dtype)), reprocess, inner
        )
        inner, stats = self.kernel.advance(system, inner, dt, None, t)
        r = stats.residual
        r = jnp.where(jnp.isnan(r0), r0, jnp.where(jnp.isnan(r), r, jnp.maximum(r, r0)))
        return (inner, dt), StepStats(residual=r)
