"""The black-box baseline: a neural ODE on the flattened state (diffrax; a development
dependency, imported when it is built).

State ``z = (vec R, ω)`` (12 numbers on SO(3); ``(vec R, x, ω, v)``, 18, on SE(3)), vector field
``ż = MLP(z, u)``, integrated by a fixed-step explicit Runge–Kutta method (Chen, Rubanova,
Bettencourt & Duvenaud, *Neural ordinary differential equations*, NeurIPS 2018).  Nothing keeps
``R`` on SO(3) nor the energy bounded: this is the comparison that the structured models of
:mod:`geomjax.learn.models` are measured against, trained on the same records, with the same
multiple-shooting loss on the measured configurations and the same optimizer budget.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.warn import renamed
from ..integrators.base import AbstractMethod, StepStats
from ..results import Status
from .identify import FitError

__all__ = ["NeuralODE", "NeuralODEFit", "NeuralODEStep", "fit_neural_ode"]


@dataclasses.dataclass(frozen=True)
class NeuralODEFit:
    """Result of :func:`fit_neural_ode`; unpacks as ``(model, z0, losses)``.

    Attributes:
        model: the trained :class:`NeuralODE`.
        z0: the flattened state of the first sample (its configuration and learned velocity),
            from which the model's rollout starts.
        losses: ``(max_iters,)`` the loss before each Adam step (NumPy).
        iterations: Adam steps run (``max_iters``: the baseline has no stopping test).
        status: :class:`geomjax.results.Status`: ``MAX_ITERS`` (its fixed budget of steps ran,
            the normal end) or ``NONFINITE`` (a loss was NaN or inf).
        message: what happened, in a sentence.
    """

    model: object
    z0: jax.Array
    losses: np.ndarray
    iterations: int
    status: Status
    message: str

    @property
    def stop_reason(self) -> str:
        """The name of :attr:`status` (``"max_iters"`` or ``"nonfinite"``)."""
        return Status(self.status).reason

    def __iter__(self):
        yield self.model
        yield self.z0
        yield self.losses

    def __len__(self):
        return 3

    def __getitem__(self, i):
        return (self.model, self.z0, self.losses)[i]

    def check(self) -> NeuralODEFit:
        """Raise :class:`~geomjax.learn.FitError` (a :class:`geomjax.results.ConvergenceError`)
        when the training broke down (a non-finite loss); a run of its whole budget is the
        normal end of this baseline and passes.  Returns ``self``."""
        if Status(self.status).failed:
            raise FitError(f"fit_neural_ode: {self.message}")
        return self


class NeuralODE(eqx.Module):
    """``ż = MLP(z, u)`` on the flattened state of a rigid body (module docstring)."""

    mlp: eqx.nn.MLP
    n_config: int = eqx.field(static=True)
    n_vel: int = eqx.field(static=True)
    n_u: int = eqx.field(static=True)

    def __init__(self, n_config, n_vel, key, n_u=0, width=64, depth=2, dtype=None):
        dtype = jnp.result_type(float) if dtype is None else dtype
        self.n_config, self.n_vel, self.n_u = n_config, n_vel, n_u
        mlp = eqx.nn.MLP(
            n_config + n_vel + n_u, n_config + n_vel, width, depth, jax.nn.tanh, key=key
        )
        self.mlp = jax.tree_util.tree_map(
            lambda x: x.astype(dtype) if eqx.is_inexact_array(x) else x, mlp
        )

    def vector_field(self, t, z, u):
        return self.mlp(jnp.concatenate([z, u]) if self.n_u else z)

    def step(self, z, u, dt, solver=None):
        """One step ``z_k → z_{k+1}`` ``(n,)`` of length ``dt`` with the control ``u`` ``(n_u,)``
        held (``None`` without controls): one step of the fixed-step explicit Runge–Kutta method
        ``solver`` (diffrax, ``Tsit5`` default), as in training."""
        import diffrax

        # the stages in a bounded loop, differentiable in both modes (diffrax's default
        # checkpointed loop is reverse-mode only; the planners' linearization is forward mode)
        solver = diffrax.Tsit5(scan_kind="bounded") if solver is None else solver
        u = jnp.zeros((self.n_u,), z.dtype) if u is None else u
        term = diffrax.ODETerm(lambda t, y, a: self.vector_field(t, y, u))
        # the solver's own step (what ``diffeqsolve`` takes once over ``[0, dt]``), not
        # ``diffeqsolve``, whose adjoint is a custom VJP (reverse mode only)
        t1 = jnp.asarray(dt, z.dtype)
        state = solver.init(term, jnp.zeros_like(t1), t1, z, None)
        return solver.step(term, jnp.zeros_like(t1), t1, z, None, state, made_jump=False)[0]

    def rollout(self, z0, dt, steps, save_every=1, controls=None, solver=None):
        """States ``(steps/save_every + 1, n)`` of a fixed-step run (:meth:`step`);
        ``controls`` ``(steps, n_u)`` held on each step."""
        u = jnp.zeros((steps, self.n_u), z0.dtype) if controls is None else controls

        def one(z, uk):
            z = self.step(z, uk, dt, solver)
            return z, z

        _, zs = jax.lax.scan(one, z0, u)
        return jnp.concatenate([z0[None], zs[save_every - 1 :: save_every]])


class NeuralODEStep(AbstractMethod):
    """The black box's own step as a geomjax method: ``step(node, z, dt, u)`` is
    :meth:`NeuralODE.step`, so that an
    :class:`~geomjax.control.OptimalControlProblem` (``system=node``, a flat state ``z``
    ``(n,)``, controls ``(n_u,)``, the Euclidean chart) plans on a trained black box, and
    :class:`~geomjax.control.OnlineMPC` flies with it, as with a structured model.

    ``solver``: the diffrax solver it was trained with (``None``: ``Tsit5``)."""

    solver: object = None
    order: ClassVar[int] = 5  # Tsit5's; the order of ``solver`` where another is given

    def control_shape(self, system):
        return (system.n_u,)

    def supports(self, system) -> bool:
        return isinstance(system, NeuralODE)

    def step(self, system, state, dt, control=None, t=0.0):
        return system.step(state, control, dt, self.solver), StepStats.explicit(state.dtype)


def fit_neural_ode(
    model,
    R_obs,
    h,
    *,
    W_obs=None,
    velocity_weight=1.0,
    segment_length=10,
    substeps=1,
    max_iters=500,
    optimizer=None,
    controls=None,
    steps=None,
):
    """Train ``model`` on measured rotations ``R_obs`` ``(N, 3, 3)`` (or flattened configurations
    ``(N, n_config)``; or a list of records) sampled every ``h``: multiple shooting over segments of ``segment_length``
    samples whose initial velocities are learned (or taken from measured velocities ``W_obs``
    ``(N, n_vel)``, which then enter the loss with weight ``velocity_weight``), loss ``Σ |vec R_pred − vec R̂|²`` plus the
    continuity of the segments; ``max_iters`` Adam iterations (``steps=`` is a deprecated
    alias: ``steps`` names time steps elsewhere).  Returns a :class:`NeuralODEFit`, which
    unpacks as ``(model, z0 of the first sample, losses)``."""
    import optax

    max_iters = renamed(max_iters, steps, "fit_neural_ode", "max_iters", "steps", 500)

    recs = list(R_obs) if isinstance(R_obs, list | tuple) else [R_obs]
    wrecs = None if W_obs is None else (list(W_obs) if isinstance(W_obs, list | tuple) else [W_obs])
    urecs = (
        None
        if controls is None
        else (list(controls) if isinstance(controls, list | tuple) else [controls])
    )
    L = segment_length
    Xs, Ws, Us = [], [], []
    for i, Ri in enumerate(recs):
        X = jnp.asarray(Ri).reshape(np.shape(Ri)[0], -1)
        S = (X.shape[0] - 1) // L
        idx = np.arange(S)[:, None] * L + np.arange(L + 1)[None, :]
        Xs.append(X[idx])
        if wrecs is not None:
            Ws.append(jnp.asarray(wrecs[i])[idx])
        if urecs is not None:
            Us.append(jnp.repeat(jnp.asarray(urecs[i])[idx[:, :-1]], substeps, axis=1))
    Xs = jnp.concatenate(Xs)  # (segments, L+1, n)
    W = jnp.concatenate(Ws) if Ws else None
    us = jnp.concatenate(Us) if Us else None
    S = Xs.shape[0]
    v0 = jnp.zeros((S, model.n_vel), Xs.dtype) if W is None else W[:, 0]
    params = (model, v0)
    opt = optax.adam(3e-3) if optimizer is None else optimizer

    def loss(p):
        m, v = p
        v = v if W is None else W[:, 0]

        def seg(x0, v0, u):
            z0 = jnp.concatenate([x0, v0])
            return m.rollout(z0, h / substeps, L * substeps, substeps, u)

        Z = (
            jax.vmap(seg)(Xs[:, 0], v, us)
            if us is not None
            else jax.vmap(lambda a, b: seg(a, b, None))(Xs[:, 0], v)
        )
        fit = jnp.sum((Z[:, :, : m.n_config] - Xs) ** 2)
        if W is not None:
            return fit + velocity_weight * jnp.sum((Z[:, :, m.n_config :] - W) ** 2)
        cont = jnp.sum((Z[:-1, -1, m.n_config :] - v[1:]) ** 2)
        return fit + cont

    @eqx.filter_jit
    def step(p, state):
        val, g = eqx.filter_value_and_grad(loss)(p)
        upd, state = opt.update(g, state, eqx.filter(p, eqx.is_inexact_array))
        return eqx.apply_updates(p, upd), state, val

    state = opt.init(eqx.filter(params, eqx.is_inexact_array))
    losses = np.zeros(max_iters)
    for k in range(max_iters):
        params, state, val = step(params, state)
        losses[k] = float(val)
    m, v = params
    v0 = v[0] if W is None else W[0, 0]
    finite = bool(np.all(np.isfinite(losses)))
    status = Status.MAX_ITERS if finite else Status.NONFINITE
    message = (
        f"ran its {max_iters} Adam steps (no stopping test)"
        + (f", final loss {losses[-1]:.6g}" if max_iters else "")
        if finite
        else f"{Status.NONFINITE.message} after {int(np.argmin(np.isfinite(losses)))} Adam "
        "steps; lower the learning rate (optimizer=) or shorten segment_length"
    )
    return NeuralODEFit(m, jnp.concatenate([Xs[0, 0], v0]), losses, max_iters, status, message)
