"""Learned models as ordinary geomjax systems.

A neural term is a callable :class:`equinox.Module` placed where a system takes a function: a
:class:`NeuralPotential` is a ``potential`` of :class:`~geomjax.EulerPoincareSystem` /
:class:`~geomjax.RigidBody` / :class:`~geomjax.RigidBodySE3`, a :class:`NeuralDissipation` is its
``force``.  The network's weights are then leaves of the system, so every integrator, the
adjoints, :func:`~geomjax.simulate_sharded` and the optimal control solvers work on the learned
model unchanged, and the model keeps the structure of the discrete flow: the LGVI of a learned
potential stays on the group to round-off and conserves the learned energy (no drift) — the
route of Lie group (forced) variational integrator networks (Duruisseaux, Duong, Leok &
Atanasov, *Lie group forced variational integrator networks for learning and control of robot
systems*, L4DC 2023, §3–4) and, in continuous time, of Duong & Atanasov, *Hamiltonian-based
neural ODE networks on the SE(3) manifold for dynamics learning and control*, RSS 2021.

:func:`fit_model` trains any selection of a system's leaves (default: every floating array of
its neural terms) through the discrete flow with optax on the multiple-shooting loss of
:func:`~geomjax.learn.fitting_loss` (position-only or position–velocity records; the segments'
initial states are learned with the weights).
"""

from __future__ import annotations

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.eager import LEGACY_EMITTERS, top_level_options
from .._internal.warn import renamed
from ..integrators.base import AbstractMethod, WrappedMethod
from ..lie import SE3, SO3, LieGroup
from ..results import Status
from ..systems.nonholonomic import NonholonomicState, NonholonomicSystem
from .identify import (
    FitError,
    _residual_parts_reset,
    fitting_problem,
    levenberg_marquardt,
    levenberg_marquardt_cg,
    segment_starts,
)

__all__ = [
    "GroupLagrangianSystem",
    "InputMapped",
    "ModelFit",
    "NeuralDissipation",
    "NeuralInertia",
    "NeuralInputMap",
    "NeuralPotential",
    "fit_model",
    "neural_leaves",
]


def _n_features(group: LieGroup, invariant: str | None) -> int:
    if invariant == "vertical":
        return 3 if group == SO3 else 4
    return 9 if group == SO3 else (12 if group == SE3 else int(np.prod(group.element_shape)))


def _features(group: LieGroup, g, invariant: str | None = None):
    """Network input of a configuration: the rotation's entries (and the position on SE(3));
    smooth on the whole group (no chart).  ``invariant="vertical"``: only what gravity sees, the
    vertical in the body frame ``Rᵀe₃`` (and the height ``x₃`` on SE(3)) — a potential invariant
    under rotations about the vertical and horizontal translations, by construction."""
    if invariant == "vertical":
        if group == SO3:
            return g[2, :]
        return jnp.concatenate([g[2, :3], g[2:3, 3]])
    if group == SO3:
        return g.reshape(-1)
    if group == SE3:
        return jnp.concatenate([g[:3, :3].reshape(-1), g[:3, 3]])
    return g.reshape(-1)


class NeuralPotential(eqx.Module):
    """``V(g) = V_prior(g) + scale · MLP(features(g))``: a learned potential on SO(3) or SE(3).

    Arguments:
        group: ``geomjax.SO3`` or ``geomjax.SE3`` (any group: its matrix entries are the input).
        key: a ``jax.random.PRNGKey`` for the weights.
        width, depth: the MLP's hidden width and number of hidden layers (softplus activations:
            a smooth potential, so its torque ``-dV`` is continuous).
        scale: output scale (the network's last layer starts small: ``V ≈ V_prior``).
        prior: optional known part of the potential (a callable of ``g``).
        invariant: ``None`` (any potential) or ``"vertical"`` (a function of ``Rᵀe₃``, and of the
            height on SE(3), only: the symmetry of gravity built in, so the learned model
            conserves the vertical component of the angular momentum exactly as the true one).
    """

    mlp: eqx.nn.MLP
    group: LieGroup = eqx.field(static=True)
    scale: float = eqx.field(static=True, default=1.0)
    prior: object = None
    invariant: str | None = eqx.field(static=True, default=None)

    def __init__(
        self, group, key, width=32, depth=2, scale=1.0, prior=None, invariant=None, dtype=None
    ):
        if invariant not in (None, "vertical"):
            raise ValueError(
                f"NeuralPotential: argument 'invariant' must be None or 'vertical', got {invariant!r}"
            )
        if invariant == "vertical" and group not in (SO3, SE3):
            raise ValueError("NeuralPotential: invariant='vertical' needs group SO3 or SE3")
        dtype = jnp.result_type(float) if dtype is None else dtype
        n_in = _n_features(group, invariant)
        self.group, self.scale, self.prior, self.invariant = group, float(scale), prior, invariant
        mlp = eqx.nn.MLP(n_in, "scalar", width, depth, activation=jax.nn.softplus, key=key)
        self.mlp = jax.tree_util.tree_map(
            lambda x: x.astype(dtype) if eqx.is_inexact_array(x) else x, mlp
        )

    def __call__(self, g):
        V = self.scale * self.mlp(_features(self.group, g, self.invariant))
        if self.prior is not None:
            V = V + self.prior(g)
        return V


class NeuralDissipation(eqx.Module):
    """A learned dissipative body force ``F(t, g, μ) = −D(g) ξ`` with ``ξ = I⁻¹μ`` and
    ``D(g) = L(g) L(g)ᵀ`` positive semidefinite by construction (``L`` lower triangular from an
    MLP), so ``dE/dt = −ξᵀ D ξ ≤ 0``: the learned force never creates energy.

    It needs the inertia to turn momentum into velocity: build it with the system's inertia
    (``NeuralDissipation(group, inertia, key)``; fit the two together through ``where``).
    Velocity dependent: not reversible by :class:`~geomjax.ReversibleAdjoint` (use
    ``checkpoint=True``)."""

    mlp: eqx.nn.MLP
    inertia: jax.Array
    group: LieGroup = eqx.field(static=True)
    scale: float = eqx.field(static=True, default=0.1)

    def __init__(self, group, inertia, key, width=16, depth=1, scale=0.1, dtype=None):
        dtype = jnp.result_type(float) if dtype is None else dtype
        n = group.dim
        n_in = _n_features(group, None)
        self.group, self.scale = group, float(scale)
        self.inertia = jnp.asarray(inertia, dtype)
        mlp = eqx.nn.MLP(n_in, n * (n + 1) // 2, width, depth, activation=jax.nn.softplus, key=key)
        self.mlp = jax.tree_util.tree_map(
            lambda x: x.astype(dtype) if eqx.is_inexact_array(x) else x, mlp
        )

    def damping(self, g):
        n = self.group.dim
        L = (
            jnp.zeros((n, n), self.inertia.dtype)
            .at[np.tril_indices(n)]
            .set(self.scale * self.mlp(_features(self.group, g)))
        )
        return L @ L.T

    def __call__(self, t, g, mu):
        xi = jnp.linalg.solve(self.inertia, mu)
        return -self.damping(g) @ xi


def _mlp(n_in, n_out, width, depth, key, dtype):
    dtype = jnp.result_type(float) if dtype is None else dtype
    mlp = eqx.nn.MLP(n_in, n_out, width, depth, activation=jax.nn.softplus, key=key)
    return jax.tree_util.tree_map(lambda x: x.astype(dtype) if eqx.is_inexact_array(x) else x, mlp)


def _check_features(features, n_in, who):
    if features is not None and not callable(features):
        raise ValueError(f"{who}: argument 'features' must be callable q -> ({n_in},) or None")
    if not (isinstance(n_in, int | np.integer) and n_in >= 1):
        raise ValueError(f"{who}: argument 'n_in' must be a positive int, got {n_in!r}")


class NeuralInertia(eqx.Module):
    """A configuration-dependent inertia ``M(q) = M_prior(q) + L(q) L(q)ᵀ + ε·scale·1``,
    symmetric positive definite by construction: ``L`` lower triangular from an MLP of the
    configuration, its
    diagonal ``exp(·)`` of the network's outputs (the log-Cholesky parameterization of Pinheiro &
    Bates, *Unconstrained parametrizations for variance-covariance matrices*, Statistics and
    Computing, 1996, §2.2; as in Lutter, Ritter & Peters, *Deep Lagrangian networks*, ICLR 2019,
    §4).

    A ``metric`` of :class:`~geomjax.variational.LagrangianSystem` (``K = ½ q̇ᵀ M(q) q̇``), so
    :class:`~geomjax.DiscreteEulerLagrange`, the adjoints and
    :func:`~geomjax.control.trajopt.solve_ocp` run on the learned model unchanged.  On a Lie
    group it is the ``inertia`` of a :class:`GroupLagrangianSystem` (``q`` is then the group
    element ``g``: give ``features``, e.g. ``lambda R: R.reshape(-1)`` and ``n_in=9``).

    Arguments:
        n: the number of coordinates (``M`` is ``(n, n)``).
        key: a ``jax.random.PRNGKey``.
        n_in: the network's input size (default ``n``; set it with ``features``).
        features: optional ``q -> (n_in,)`` (e.g. ``(cos θ, sin θ)`` for an angle: periodic).
        width, depth: the MLP's hidden width and layers (softplus: a smooth ``M``).
        scale: ``M`` starts near ``scale · 1`` (plus the prior).
        prior: optional known part ``M_prior(q)`` (positive semidefinite).
        floor: ``ε``: the eigenvalues are at least ``ε·scale`` (a floor that keeps ``M``
            definite in floating point too, where ``L Lᵀ`` of a badly conditioned ``L`` rounds
            to a singular matrix; Lutter et al. add the same positive shift).
    """

    mlp: eqx.nn.MLP
    n: int = eqx.field(static=True)
    scale: float = eqx.field(static=True, default=1.0)
    floor: float = eqx.field(static=True, default=1e-3)
    features: object = None
    prior: object = None

    def __init__(
        self,
        n,
        key,
        n_in=None,
        features=None,
        width=32,
        depth=2,
        scale=1.0,
        prior=None,
        floor=1e-3,
        dtype=None,
    ):
        if not (isinstance(n, int | np.integer) and n >= 1):
            raise ValueError(f"NeuralInertia: argument 'n' must be a positive int, got {n!r}")
        n_in = n if n_in is None else n_in
        _check_features(features, n_in, "NeuralInertia")
        if not float(scale) > 0:
            raise ValueError(f"NeuralInertia: argument 'scale' must be positive, got {scale!r}")
        if not float(floor) >= 0:
            raise ValueError(f"NeuralInertia: argument 'floor' must be ≥ 0, got {floor!r}")
        self.n, self.scale, self.features, self.prior = int(n), float(scale), features, prior
        self.floor = float(floor)
        self.mlp = _mlp(n_in, n * (n + 1) // 2, width, depth, key, dtype)
        # the last layer starts at zero: L = sqrt(scale) 1, M = (1 + ε) scale 1 (+ the prior)
        last = self.mlp.layers[-1]
        self.mlp = eqx.tree_at(
            lambda m: (m.layers[-1].weight, m.layers[-1].bias),
            self.mlp,
            (jnp.zeros_like(last.weight), jnp.zeros_like(last.bias)),
        )

    def cholesky(self, q):
        """``L(q)`` ``(n, n)``, lower triangular with a positive diagonal."""
        x = q if self.features is None else self.features(q)
        raw = self.mlp(x)
        n = self.n
        L = jnp.zeros((n, n), raw.dtype).at[np.tril_indices(n)].set(raw)
        d = jnp.diag_indices(n)
        L = L.at[d].set(jnp.exp(L[d]))
        return jnp.sqrt(jnp.asarray(self.scale, raw.dtype)) * L

    def __call__(self, q):
        L = self.cholesky(q)
        M = L @ L.T + (self.floor * self.scale) * jnp.eye(self.n, dtype=L.dtype)
        if self.prior is not None:
            M = M + self.prior(q)
        return M


class _GroupLagrangian(eqx.Module):
    """``L(g, x, v) = ½ vᵀ I(g) v − V(g)`` (``x`` empty)."""

    inertia: object
    potential: object = None

    def __call__(self, g, x, v):
        L = 0.5 * v @ (self.inertia(g) @ v)
        return L if self.potential is None else L - self.potential(g)


def _unconstrained(g, x, v, t):
    return jnp.zeros((0,), v.dtype)


class GroupLagrangianSystem(NonholonomicSystem):
    """A system on a Lie group with a *configuration-dependent* inertia,

        L(g, ξ) = ½ ξᵀ I(g) ξ − V(g),   ξ = g⁻¹ġ,

    e.g. ``I = NeuralInertia(group.dim, key, n_in=9, features=lambda R: R.reshape(-1))`` (SPD by
    construction) and ``V`` a :class:`NeuralPotential`.  Its equations of motion are the forced
    Euler–Poincaré equations with the configuration term (left trivialization; Holm, Marsden &
    Ratiu, *The Euler–Poincaré equations and semidirect products with applications to continuum
    theories*, Adv. Math. 137, 1998, §3; Bloch, *Nonholonomic Mechanics and Control*, §3.10):

        d/dt (I(g) ξ) = ad*_ξ (I(g) ξ) + D_g L(g, ξ) + u,   ⟨D_g L, η⟩ = d/dε L(g exp(εη), ξ),

    where ``D_g L = ½ ∂_g(ξᵀ I(g) ξ) − dV(g)`` carries the derivative of the inertia along the
    group.  It is a :class:`~geomjax.NonholonomicSystem` without constraints (on ``G × R⁰``), so
    :class:`~geomjax.NonholonomicVI` integrates it: the discrete Euler–Poincaré equations of the
    LGVI's discrete Lagrangian with the configuration-dependent part by the trapezoidal rule,
    ``L_d = h/2 [L(g_k, ξ_k) + L(g_{k+1}, ξ_k)]``, ``g_{k+1} = g_k τ(h ξ_k)`` (symmetric, second
    order, on the group to round-off, the energy error bounded; for a constant inertia it is the
    LGVI).  :func:`~geomjax.simulate`, the adjoints (:class:`~geomjax.ReversibleAdjoint`
    included), :func:`~geomjax.simulate_sharded` and :func:`fit_model` /
    :func:`fit_parameters` (default method :class:`~geomjax.NonholonomicVI` ``()``) take it.

    Arguments:
        group: the Lie group (e.g. ``geomjax.SO3``, ``geomjax.SE3``).
        inertia: ``g -> (dim, dim)`` SPD matrix, a callable ``eqx.Module`` (its arrays are
            leaves of the system) or a function.
        potential: optional ``g -> scalar``.

    States are :class:`~geomjax.NonholonomicState` ``(g, x, v, lam)`` with ``v = ξ`` the body
    velocity and ``x``, ``lam`` empty: build one with :meth:`state_from_velocity`.
    """

    def __init__(self, group: LieGroup, inertia, potential=None):
        if not callable(inertia):
            raise ValueError(
                "GroupLagrangianSystem: argument 'inertia' must be callable g -> (dim, dim), got "
                f"{type(inertia).__name__}"
            )
        if potential is not None and not callable(potential):
            raise ValueError(
                "GroupLagrangianSystem: argument 'potential' must be callable g -> scalar or "
                f"None, got {type(potential).__name__}"
            )
        if isinstance(group, LieGroup):
            g = jax.ShapeDtypeStruct(group.element_shape, jnp.result_type(float))
            try:
                shape = jax.eval_shape(inertia, g).shape
            except Exception as e:
                raise ValueError(
                    f"GroupLagrangianSystem: argument 'inertia' must be a function of g "
                    f"{group.element_shape}; calling it failed with {type(e).__name__}: {e}"
                ) from e
            if shape != (group.dim, group.dim):
                raise ValueError(
                    f"GroupLagrangianSystem: argument 'inertia' must return a "
                    f"{(group.dim, group.dim)} matrix, got {shape}"
                )
        super().__init__(group, _GroupLagrangian(inertia, potential), _unconstrained)

    @property
    def inertia(self):
        """The inertia function ``g -> I(g)``."""
        return self.lagrangian_fn.inertia

    @property
    def potential(self):
        """The potential ``g -> V(g)`` (or None)."""
        return self.lagrangian_fn.potential

    def inertia_matrix(self, g) -> jax.Array:
        """``I(g)`` ``(dim, dim)``."""
        return self.inertia(g)

    def state_from_velocity(self, g, xi) -> NonholonomicState:
        """The state at ``g`` with body velocity ``xi`` (no constraints: nothing to solve, so it
        may be traced)."""
        xi = jnp.asarray(xi)
        dtype = jnp.result_type(g, xi)
        return NonholonomicState(
            jnp.asarray(g, dtype), jnp.zeros((0,), dtype), xi.astype(dtype), jnp.zeros((0,), dtype)
        )

    def split(self, state):
        """``(g, ξ)`` of a state (the fitting loss compares both with the records)."""
        return state.g, state.v

    def velocity(self, v) -> jax.Array:
        """The body velocity of the second part of :meth:`split` (the velocity itself)."""
        return v


class NeuralInputMap(eqx.Module):
    """A learned input map: controls ``u`` ``(m,)`` → generalized force ``B(q) u`` ``(n,)`` with
    ``B(q) = B_prior + scale · MLP(q)`` (reshaped ``(n, m)``): a known actuation layout corrected
    by a configuration-dependent network (actuators whose gain or direction changes with the
    configuration).

    Its call signature is the ``force`` of :class:`~geomjax.variational.LagrangianSystem`,
    ``F(t, q, q̇, u)`` (zero when ``u`` is None), so every method, the adjoints and
    :func:`~geomjax.control.trajopt.solve_ocp` use it unchanged.

    Arguments:
        n: coordinates.  m: controls.  key: a ``jax.random.PRNGKey``.
        n_in, features: the network's input (default ``q`` itself), as :class:`NeuralInertia`.
        prior: ``B_prior`` ``(n, m)`` (default zeros).
        scale: the network's output scale (its last layer starts at zero: ``B = B_prior``).
    """

    mlp: eqx.nn.MLP
    prior: jax.Array
    n: int = eqx.field(static=True)
    m: int = eqx.field(static=True)
    scale: float = eqx.field(static=True, default=1.0)
    features: object = None

    def __init__(
        self,
        n,
        m,
        key,
        n_in=None,
        features=None,
        prior=None,
        width=16,
        depth=1,
        scale=1.0,
        dtype=None,
    ):
        n_in = n if n_in is None else n_in
        _check_features(features, n_in, "NeuralInputMap")
        for name, v in (("n", n), ("m", m)):
            if not (isinstance(v, int | np.integer) and v >= 1):
                raise ValueError(
                    f"NeuralInputMap: argument '{name}' must be a positive int, got {v!r}"
                )
        dt = jnp.result_type(float) if dtype is None else dtype
        prior = jnp.zeros((n, m), dt) if prior is None else jnp.asarray(prior, dt)
        if prior.shape != (n, m):
            raise ValueError(
                f"NeuralInputMap: argument 'prior' must have shape (n, m) = {(n, m)}, got "
                f"{prior.shape}"
            )
        self.n, self.m, self.scale, self.features, self.prior = (
            int(n),
            int(m),
            float(scale),
            features,
            prior,
        )
        mlp = _mlp(n_in, n * m, width, depth, key, dtype)
        last = mlp.layers[-1]
        self.mlp = eqx.tree_at(
            lambda t: (t.layers[-1].weight, t.layers[-1].bias),
            mlp,
            (jnp.zeros_like(last.weight), jnp.zeros_like(last.bias)),
        )

    def matrix(self, q):
        """``B(q)`` ``(n, m)``."""
        x = q if self.features is None else self.features(q)
        return self.prior + self.scale * self.mlp(x).reshape(self.n, self.m)

    def __call__(self, t, q, qdot, u):
        if u is None:
            return jnp.zeros((self.n,), q.dtype)
        return self.matrix(q) @ u


class InputMapped(WrappedMethod):
    """``method`` driven through a configuration-dependent input map: the body force of a step
    is ``B(g_k) u`` for the command ``u`` ``(m,)``, ``B(g) = input_map.matrix(g)`` ``(dim, m)``
    evaluated at the step's initial configuration and held over the step (e.g. a
    :class:`NeuralInputMap` of the pose's entries: a learned rotor-to-wrench map that changes
    with the attitude).  The configuration-dependent counterpart of
    :class:`~geomjax.control.trajopt.Actuated`; :func:`~geomjax.control.trajopt.solve_ocp`
    and the adjoints take it like any method, and :func:`geomjax.simulate` takes commands of its
    width (:meth:`control_shape`)."""

    method: AbstractMethod
    input_map: eqx.Module

    def control_shape(self, system):
        m = getattr(self.input_map, "m", None)  # the commands' width (None: not checked)
        return None if m is None else (m,)

    def step(self, system, state, dt, control=None, t=0.0):
        if control is None:
            return self.method.step(system, state, dt, None, t)
        g, _ = system.split(state)
        return self.method.step(system, state, dt, self.input_map.matrix(g) @ control, t)


def neural_leaves(system):
    """``where`` selecting every floating array of the neural terms' networks
    (:class:`NeuralPotential`, :class:`NeuralDissipation`, :class:`NeuralInertia`,
    :class:`NeuralInputMap`) of ``system`` — the default of :func:`fit_model`."""

    def is_neural(x):
        return isinstance(x, NeuralPotential | NeuralDissipation | NeuralInertia | NeuralInputMap)

    mods = [x for x in jax.tree_util.tree_leaves(system, is_leaf=is_neural) if is_neural(x)]
    if not mods:
        raise ValueError("fit_model: argument 'system' has no neural term; pass 'where'")
    # structure only (eqx.tree_at calls this on a tree of placeholders): weights and biases
    return tuple(
        x
        for m in mods
        for layer in m.mlp.layers
        for x in (layer.weight, layer.bias)
        if x is not None
    )


@dataclasses.dataclass(frozen=True)
class ModelFit:
    """Result of :func:`fit_model`; unpacks as ``(system, losses)``.

    Attributes:
        system: the trained system.
        losses: the loss ``½ Σ r²`` after each step (NumPy); for ``solver="lm"`` the cost of the
            accepted point after each iteration, the first being the starting point's, stage
            after stage.
        converged: whether the last stage met its stopping test (see :func:`fit_model`: for
            Adam the relative fall of the loss over a window of steps, or a vanishing gradient;
            for Levenberg–Marquardt the Gauss–Newton decrement, the step relative to the
            unknowns, or a vanishing gradient).
        status: :class:`geomjax.results.Status`: ``CONVERGED``, ``MAX_ITERS`` (the last stage
            ran its iterations without meeting its stopping test) or ``NONFINITE``.
        message: ``"converged"``, or a sentence saying why not and what to change.
        iterations: optimizer steps (Adam) or Levenberg–Marquardt iterations (Jacobian
            evaluations), all stages together.
        solver: ``"adam"`` (or the ``optimizer`` given) or ``"lm"``.
        unknowns: the last stage's flat vector of unknowns at the end, in the layout of ``y`` of
            :func:`~geomjax.learn.fitting_loss` (the fitted leaves unconstrained, then the
            segments' configuration offsets and velocities).
    """

    system: object
    losses: np.ndarray
    converged: bool
    status: Status
    message: str
    iterations: int
    solver: str
    unknowns: jax.Array

    @property
    def stop_reason(self) -> str:
        """The name of :attr:`status` (``"converged"``, ``"max_iters"``, ``"nonfinite"``)."""
        return Status(self.status).reason

    def __iter__(self):
        yield self.system
        yield self.losses

    def __len__(self):
        return 2

    def __getitem__(self, i):
        return (self.system, self.losses)[i]

    def check(self) -> ModelFit:
        """Raise :class:`~geomjax.learn.FitError` unless the training converged."""
        if not self.converged:
            raise FitError(f"fit_model: {self.message}")
        return self


def fit_model(
    system,
    data,
    where=None,
    *,
    optimizer=None,
    solver: str = "adam",
    max_iters: int = 500,
    segment_length=10,
    substeps: int = 1,
    method=None,
    noise=1.0,
    velocity_noise=None,
    continuity_weight: float = 1.0,
    adjoint=None,
    callback=None,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    ftol: float = 1e-4,
    window: int = 50,
    steps: int | None = None,
    restart: str = "records",
    cg_steps: int = 50,
) -> ModelFit:
    """Train the leaves ``where(system)`` (default :func:`neural_leaves`) through the discrete flow.

    Minimizes the multiple-shooting loss of :func:`~geomjax.learn.fitting_loss` (short segments,
    ``segment_length`` samples, tied by continuity residuals of weight ``continuity_weight``: the
    gradient never crosses a long, possibly chaotic, horizon), the segments' initial
    configurations and velocities learned with the weights, by

    * ``solver="adam"`` (default): ``optimizer`` (default ``optax.adam`` with a learning rate
      decaying from 1e-2 to 5e-4) for at most ``max_iters`` steps.  Stopping test: a stage ends
      when the loss fell by at most ``ftol`` (relative, default ``1e-4``) over the last
      ``window`` steps (default 50), or the gradient vanished (``max |∇loss| ≤ atol``); the
      result is ``converged`` when the last stage met it, and its status otherwise says how much
      the loss still fell (``ftol=0``: every step runs).
    * ``solver="lm"``: Levenberg–Marquardt on the same residuals (the solver of
      :func:`~geomjax.learn.fit_parameters`, leaves of kind ``"free"``), at most ``max_iters``
      iterations, in one compiled loop; converged when the Gauss–Newton decrement (what a full
      Gauss–Newton step would still gain) is at most ``rtol·loss + atol`` (defaults ``1e-8``,
      ``1e-10``), or a step changes the loss by at most that and the unknowns by a relative
      ``sqrt(rtol)``, or the gradient vanishes (``max |∇loss| ≤ atol``).  The step is taken
      through the SVD of the Jacobian with Levenberg's damping ``λ σ₁²`` (``σ₁`` its largest
      singular value), the same in every direction of the unknowns: Marquardt's per-column
      scaling lets the first layers' weights, whose columns are small while the last layer is,
      take steps far beyond where the linearization holds, and stalled on the learning guide's
      pendulum.  For small networks (a few thousand weights): each iteration forms the
      Jacobian by forward mode, one pass per unknown, and holds it, ``(residuals × unknowns)``
      floats, and takes an SVD of it.  No covariance or rank analysis (an overparameterized
      network is rank deficient by nature: the damping keeps each step defined).
      ``optimizer`` must then be None.
    * ``solver="lm-cg"``: Levenberg–Marquardt with the same damping ``λ σ₁²`` (``λ`` updated by
      Nielsen's rule from the ratio of actual to predicted decrease), its step
      ``(JᵀJ + μ I) δ = −Jᵀr`` solved by conjugate gradients from products with the residuals'
      linearization (``jax.linearize`` and its transpose: one forward-mode and one reverse-mode
      product per conjugate-gradient iteration, at most ``cg_steps``, default 50), so the
      Jacobian is never formed: an iteration costs at most ``cg_steps`` gradient evaluations
      whatever the number of unknowns (networks of thousands of weights on long records, where
      ``"lm"``'s Jacobian by forward mode takes one pass per unknown).  Converged when the
      decrease that the damped Gauss–Newton model predicts for the step is at most
      ``rtol·loss + atol`` at damping ``λ ≤ 10⁻³``, or by the step and gradient tests of
      ``"lm"`` (:func:`~geomjax.learn.identify.levenberg_marquardt_cg`).

    ``segment_length`` may be a schedule, a sequence of ``(length, max_iters)`` stages, e.g.
    ``((2, 300), (5, 150), (10, 150))``: short segments first (each nearly linear in the
    unknown forces), then longer ones (the long-horizon behaviour); ``max_iters`` is then
    ignored (each stage's count is its iteration cap; convergence is that of the last
    stage).  Every stage is the same compiled program: the unknowns hold one state per sample
    interval, and a stage marks which intervals start a segment (the others continue the
    motion; their states are not used), so the segment length is data, not a shape.  With
    ``restart="records"`` (default) each stage restarts the segments' states from the records
    (the measured configurations, finite-difference velocities); with ``restart="motion"``
    each later stage starts every interval where the previous stage's fitted motion is at that
    interval (its segments' states, continued through the segments), so a stage of longer
    segments starts at the previous fit instead of at velocities with the noise of finite
    differences (a schedule whose lengths divide each other keeps every shared start's state
    exactly).  The weights (and Adam's step count and the weights' moment estimates) carry
    over either way.  The program is also reused by later fits of the
    same structure (records' lengths, network, schedule length for the default optimizer).
    ``callback(i, loss)`` is called after each step (Adam) or with each iteration's loss after
    each stage's solve (``"lm"``).

    Returns:
        :class:`ModelFit`, which unpacks as ``(system, losses)``: the trained system and the loss
        after each step (NumPy; the loss is ``½ Σ r²`` in units of the noise, so ≈ half the
        number of residuals once fitted); ``.check()`` raises :class:`~geomjax.learn.FitError`
        unless converged.
    """
    if solver not in ("adam", "lm", "lm-cg"):
        raise ValueError(
            f"fit_model: argument 'solver' must be 'adam', 'lm' or 'lm-cg', got {solver!r}"
        )
    if solver != "adam" and optimizer is not None:
        raise ValueError(f"fit_model: argument 'optimizer' must be None with solver={solver!r}")
    if not (isinstance(cg_steps, int | np.integer) and cg_steps >= 1):
        raise ValueError(f"fit_model: argument 'cg_steps' must be a positive int, got {cg_steps!r}")
    if restart not in ("records", "motion"):
        raise ValueError(
            f"fit_model: argument 'restart' must be 'records' or 'motion', got {restart!r}"
        )
    max_iters = renamed(max_iters, steps, "fit_model", "max_iters", "steps", 500)
    where = neural_leaves if where is None else where
    stages = (
        [(int(segment_length), int(max_iters))]
        if isinstance(segment_length, int | np.integer)
        else [(int(a), int(b)) for a, b in segment_length]
    )
    if any(n < 1 for _, n in stages):
        raise ValueError("fit_model: argument 'max_iters' (of every stage) must be a positive int")
    if not (isinstance(window, int | np.integer) and window >= 1) or not float(ftol) >= 0:
        raise ValueError(
            f"fit_model: arguments 'window' (a positive int) and 'ftol' (≥ 0) got {window!r}, "
            f"{ftol!r}"
        )
    pb = fitting_problem(
        system,
        data,
        where,
        "free",
        method,
        substeps,
        1,  # one unknown state per sample interval; each stage marks its segments' starts
        noise,
        velocity_noise,
        continuity_weight,
        adjoint,
        "fit_model",
    )
    n_theta = sum(pb.spec.theta_sizes)
    weight = jnp.asarray(continuity_weight, pb.dtype)
    if solver in ("lm", "lm-cg"):
        cg = cg_steps if solver == "lm-cg" else None
        return _fit_lm(
            system, where, pb, stages, weight, n_theta, callback, rtol, atol, restart, cg
        )
    total = sum(b for _, b in stages)
    name = "adam" if optimizer is None else "optimizer"
    if optimizer is None:
        optimizer = _default_adam(total)
    losses, done, iterations = [], False, 0
    y = pb.flat0
    opt_state = optimizer.init(y)
    starts = None
    for length, n_steps in stages:
        # each stage starts its segments from the measured states (or the previous stage's
        # motion); the weights, the optimizer's step count and the weights' moment estimates
        # carry over (the segments' moments not)
        y = _stage_start(pb, y, n_theta, starts, restart)
        starts = segment_starts(pb, length)
        opt_state = _restart_states(optimizer, opt_state, y, n_theta)
        first = len(losses)
        done = False
        for _ in range(n_steps):
            y, opt_state, val, gmax = _adam_step(y, opt_state, starts, weight, optimizer, pb.args)
            losses.append(float(val))
            iterations += 1
            if callback is not None:
                callback(len(losses) - 1, losses[-1])
            k = len(losses) - first
            if float(gmax) <= atol:
                done = True  # the gradient vanished
            elif ftol > 0 and k > window:
                old, new = losses[-1 - window], losses[-1]
                if old - new <= ftol * abs(new):
                    done = True  # the loss fell by at most ftol over the window
            if done:
                break
    system = _put_leaves(system, where, pb.unravel(y)[0])
    if done:
        message = "converged"
    else:
        tail = losses[-1 - min(window, len(losses) - 1)]
        message = (
            f"ran its max_iters={total} steps without meeting the stopping test (the loss still fell by "
            f"{(tail - losses[-1]) / max(abs(losses[-1]), 1e-300):.1e} relative over the last "
            f"{min(window, len(losses) - 1)} steps, more than ftol={ftol:g}): raise max_iters, "
            "or use solver='lm'"
        )
    return _model_fit(
        system, losses, done, message, iterations, name, _stage_unknowns(pb, y, stages[-1][0])
    )


@functools.lru_cache(maxsize=8)
def _default_adam(total):
    """The default optimizer (cached: the same transformation, so the compiled step of
    :func:`_adam_step` is reused by every fit of the same structure and length)."""
    import optax

    return optax.adam(optax.exponential_decay(1e-2, total, 0.05))


def _adam_step_program(y, opt_state, starts, weight, optimizer, args):
    """One optimizer step on the loss of :func:`~geomjax.learn.identify._residual_parts_reset`
    (the segments' starts traced: one program for every stage of a schedule)."""
    import optax

    def loss(y):
        d, c = _residual_parts_reset(y, weight, starts, *args)
        return 0.5 * (jnp.sum(d**2) + jnp.sum(c**2))

    val, grad = jax.value_and_grad(loss)(y)
    upd, opt_state = optimizer.update(grad, opt_state, y)
    return optax.apply_updates(y, upd), opt_state, val, jnp.max(jnp.abs(grad))


# compiled with XLA:CPU's small-loop threshold raised for this program alone (the integrator's
# loops in the loss and its gradient as single kernels) and its legacy elemental emitters: the
# program (about 4 200 jaxpr equations: the loss's forward scan over the intervals ~1 500 with
# the integrator's linearization, its transpose ~1 300, the weights' hoisted part ~400, Adam ~40)
# compiles into ~660 kernels, and the MLIR fusion emitters spend most of the compilation on
# them: with the legacy ones the guide's pendulum trains in 32 % less CPU time, compilation
# included (20.6 -> 14.0 s on a loaded 2-core x86-64 CPU, float64), the same losses to round-off
_adam_step = top_level_options(_adam_step_program, LEGACY_EMITTERS, small_loops=True)


def _restart_states(optimizer, opt_state, y, n_theta):
    """The optimizer state for a stage starting at ``y``: every vector of the unknowns' size
    fresh from ``optimizer.init(y)`` past the ``n_theta`` weights (the segments' states
    restart), the rest (the weights' entries, the step counts) carried over."""
    new = optimizer.init(y)

    def merge(o, n):
        if eqx.is_array(o) and eqx.is_array(n) and n.shape == y.shape and o.shape == y.shape:
            return n.at[:n_theta].set(o[:n_theta])
        return o

    return jax.tree_util.tree_map(merge, opt_state, new)


def _continued_program(y, starts, args):
    parts = _residual_parts_reset(y, 1.0, starts, *args, states=True)
    return [(d.reshape(-1), x.reshape(-1)) for d, x in parts]


# the legacy emitters, as the solvers' programs (restart="motion": once per fit)
_continued = top_level_options(_continued_program, LEGACY_EMITTERS, small_loops=True)


def _stage_start(pb, y, n_theta, starts, restart):
    """The unknowns a stage starts from: the weights of ``y``, and the segments' states from
    the records (``restart="records"``, and the first stage) or from the motion of ``y`` with
    the previous stage's segment ``starts`` (``"motion"``)."""
    if restart == "records" or starts is None:
        return jnp.concatenate([y[:n_theta], pb.flat0[n_theta:]])
    parts = [y[:n_theta]]
    for d, x in _continued(y, starts, pb.args):
        parts += [d, x]
    return jnp.concatenate(parts)


def _stage_unknowns(pb, y, length):
    """``y`` (one state per interval) in the layout of :func:`~geomjax.learn.fitting_loss` at
    segment length ``length``: the weights, then per group of records the states of the
    segments' first intervals."""
    theta, deltas, xis = pb.unravel(y)
    parts = [t.reshape(-1) for t in theta]
    for d, x in zip(deltas, xis, strict=True):
        L = min(int(length), d.shape[1])
        parts += [d[:, ::L].reshape(-1), x[:, ::L].reshape(-1)]
    return jnp.concatenate(parts)


def _active_columns(pb, n_theta, length):
    """Indices of the unknowns the residuals of segment length ``length`` depend on: the weights
    and the states of the segments' first intervals."""
    idx, o = [np.arange(n_theta)], n_theta
    for shape in pb.spec.layout:  # (records, intervals, dim), deltas then velocities
        n = int(np.prod(shape))
        first = np.zeros(shape, bool)
        first[:, :: min(int(length), shape[1])] = True
        on = np.flatnonzero(first.reshape(-1))
        idx += [o + on, o + n + on]
        o += 2 * n
    return np.concatenate(idx)


def _put_leaves(system, where, theta):
    leaves = _as_tuple(where(system))
    vals = tuple(t.reshape(np.shape(x)) for t, x in zip(theta, leaves, strict=True))
    single = not isinstance(where(system), tuple | list)
    return eqx.tree_at(where, system, replace=vals[0] if single else vals)


def _fit_lm(system, where, pb, stages, weight, n_theta, callback, rtol, atol, restart, cg=None):
    """Levenberg–Marquardt stage after stage (see :func:`fit_model`): one compiled program for
    every stage (the segments' starts and the iteration cap are traced)."""
    losses, iterations, cg_total = [], 0, 0
    cap_max = max(cap for _, cap in stages)
    cols = [_active_columns(pb, n_theta, length) for length, _ in stages]
    width = max(c.size for c in cols)
    y = pb.flat0
    starts = None
    for (length, cap), c in zip(stages, cols, strict=True):
        y = _stage_start(pb, y, n_theta, starts, restart)
        starts = segment_starts(pb, length)
        c = np.concatenate([c, np.full(width - c.size, y.size)])  # padded past the end
        if cg is None:
            y, _, _, done, k, why, costs = levenberg_marquardt(
                y,
                weight,
                cap,
                rtol,
                atol,
                pb.args,
                history=cap_max,
                svd=True,
                starts=starts,
                cols=jnp.asarray(c),
            )
        else:
            y, done, k, why, costs, n_cg = levenberg_marquardt_cg(
                y,
                weight,
                cap,
                rtol,
                atol,
                pb.args,
                cg_steps=cg,
                history=cap_max,
                starts=starts,
                cols=jnp.asarray(c),
            )
            cg_total += n_cg
        iterations += k
        for c in costs:
            losses.append(float(c))
            if callback is not None:
                callback(len(losses) - 1, losses[-1])
    system = _put_leaves(system, where, pb.unravel(y)[0])
    message = (
        "converged"
        if done
        else f"the Levenberg–Marquardt solve did not converge ({why}) in {k} iterations of the "
        f"last stage (segment length {length}): raise its max_iters, or rtol"
    )
    name = "lm" if cg is None else "lm-cg"
    return _model_fit(
        system, losses, done, message, iterations, name, _stage_unknowns(pb, y, length)
    )


def _model_fit(system, losses, done, message, iterations, solver, unknowns) -> ModelFit:
    """The result, its status from the stopping test and the losses' finiteness."""
    losses = np.asarray(losses)
    finite = bool(np.all(np.isfinite(losses)))
    status = Status.CONVERGED if done and finite else Status.MAX_ITERS
    if not finite:
        status = Status.NONFINITE
        message = (
            "the loss became NaN or inf: lower the learning rate, shorten segment_length or "
            "check the model at the records' states"
        )
    return ModelFit(
        system, losses, status == Status.CONVERGED, status, message, iterations, solver, unknowns
    )


def _as_tuple(x):
    return tuple(x) if isinstance(x, tuple | list) else (x,)
