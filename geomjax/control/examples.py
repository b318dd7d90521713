"""Worked control problems.

The optimal-control problems are the factories, each returning an
:class:`~geomjax.control.trajopt.OptimalControlProblem` for
:func:`~geomjax.control.trajopt.solve_ocp` and :func:`~geomjax.control.run_mpc`:
:func:`attitude_problem` (SO(3), torques), :func:`pose_problem` (SE(3), wrenches),
:func:`quadrotor_problem` (crocoddyl's quadrotor; :func:`quadrotor_system` builds its body with
another mass, e.g. a plant), :func:`cartpole_problem`,
:func:`rolling_ball_problem` and :func:`spacecraft_problem` (base velocities of base-controlled
systems).  For first-order optimization with :func:`~geomjax.control.optimize` the classes below
are small :class:`equinox.Module` s with ``initial_params()``, ``loss(params)``,
``simulate(params)`` and ``errors(params)``:

* :class:`AttitudeManeuver`, :class:`PoseManeuver` — :func:`attitude_problem` and
  :func:`pose_problem` posed for shooting (:class:`SineShooting`: sine-mode torques or wrenches,
  the problem's own cost): rest-to-rest reorientation on SO(3) and manoeuvre on SE(3).
* :class:`BallOnPlate` — a closed contact path on a fixed plate that brings a rolling ball back to
  its start with a target orientation (the rolling kinematics are a horizontal lift).
* :class:`SpacecraftReorientation` — Cabrera, *Base-controlled mechanical systems and geometric phases*, §5.3: a small ball (a robot) rolling inside a big
  one (the spacecraft) along a closed path that turns the spacecraft to a target attitude
  (:func:`geomjax.reconstruction.ball_in_ball`, horizontal lift at zero angular momentum).
* :class:`ShapeReorientation` — zero-angular-momentum reorientation of a body by a closed loop of
  its shape (point masses moved in the body frame; falling-cat type).

The kinematic examples integrate a left- or right-invariant ODE ``ġ = g ξ(t)`` / ``ġ = ξ(t) g`` on
the group with :class:`~geomjax.reconstruction.Magnus4` (fourth-order Magnus, two Gauss points;
the integrator of :class:`~geomjax.reconstruction.HorizontalLift` too) through the one driver
:func:`geomjax.simulate`: :class:`~geomjax.reconstruction.KinematicSystem` is the reconstruction
equation with a known velocity.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.tracing import is_traced
from ..integrators.euler import SemiImplicitEuler
from ..integrators.lgvi import LGVI
from ..integrators.simulate import simulate
from ..lie import SE3, SO3
from ..reconstruction.base_velocity import BaseVelocityState, BaseVelocitySystem, LiftMagnus4
from ..reconstruction.methods import KinematicState, KinematicSystem, Magnus4, gauss_times
from ..systems.base import LieGroupState
from ..systems.rigid_body import RigidBody, RigidBodySE3, RigidBodyState
from .curves import FourierLoop, Trajectory
from .losses import control_effort, group_distance, path_energy

__all__ = [
    "QUADROTOR",
    "ROLLING_BALL",
    "SPACECRAFT",
    "AttitudeManeuver",
    "BallOnPlate",
    "PoseManeuver",
    "ShapeReorientation",
    "SineShooting",
    "SpacecraftReorientation",
    "attitude_problem",
    "cartpole_problem",
    "loop_controls",
    "pose_problem",
    "quadrotor_actuation",
    "quadrotor_problem",
    "quadrotor_system",
    "rolling_ball_problem",
    "sine_basis_controls",
    "spacecraft_problem",
]


def __dir__():
    """The worked problems only (not the modules and names this module imports)."""
    return sorted(__all__)


def _time_step(duration, steps, where):
    """``duration / steps`` of a worked problem, its arguments checked."""
    if not (isinstance(steps, int) and steps >= 1):
        raise ValueError(f"{where}: argument 'steps' must be a positive int, got {steps!r}")
    if isinstance(duration, int | float) and not (math.isfinite(duration) and duration > 0):
        raise ValueError(
            f"{where}: argument 'duration' must be a finite positive number, got {duration!r}"
        )
    return duration / steps


def sine_basis_controls(coeffs, steps: int):
    """Zero-order-hold controls ``u_k = Σ_j c_j sin(π j (k + ½)/steps)`` ``(steps, m)`` from
    coefficients ``(J, m)``: a smooth control that vanishes at both ends (rest to rest)."""
    J = coeffs.shape[0]
    s = (jnp.arange(steps, dtype=coeffs.dtype) + 0.5) / steps
    basis = jnp.sin(math.pi * jnp.arange(1, J + 1, dtype=coeffs.dtype)[None, :] * s[:, None])
    return basis @ coeffs


# --- example 4: rigid-body attitude on SO(3) and pose on SE(3), posed for shooting ---------------
class SineShooting(eqx.Module):
    """An :class:`~geomjax.control.trajopt.OptimalControlProblem` posed for first-order shooting
    with :func:`~geomjax.control.optimize`: the controls are ``J`` sine modes
    (:func:`sine_basis_controls`, zero at both ends: rest to rest), the loss is the problem's own
    cost ``J = Σ dt·l(t_k, x_k, u_k) + Φ(x_N)`` of their rollout by :func:`~geomjax.simulate`
    (the problem's system and method).  The second-order solvers take ``problem`` itself
    (:func:`~geomjax.control.trajopt.solve_ocp`); both minimize the same cost, over a smaller
    control space here.

    Attributes:
        problem: the optimal-control problem (its bounds and constraints are not used here).
        modes: the number ``J`` of sine modes; parameters ``c`` ``(J, control_dim)``.
        checkpoint: rematerialize the steps in the backward pass (``simulate(checkpoint=True)``).
    """

    problem: object
    modes: int = eqx.field(static=True)
    checkpoint: bool = eqx.field(static=True, default=True)

    def __check_init__(self):
        if not (isinstance(self.modes, int) and self.modes >= 1):
            raise ValueError(
                f"{type(self).__name__}: argument 'modes' must be a positive int, got {self.modes!r}"
            )

    @property
    def system(self):
        return self.problem.system

    @property
    def dt(self):
        return self.problem.dt

    @property
    def steps(self) -> int:
        return self.problem.steps

    @property
    def duration(self) -> float:
        return float(self.problem.dt) * self.problem.steps

    def initial_params(self):
        """The documented initial guess ``c = 0`` (no control), ``(modes, control_dim)``."""
        return jnp.zeros((self.modes, self.problem.control_dim), self.problem.dtype)

    def controls(self, params):
        """``(steps, control_dim)`` zero-order-hold controls."""
        return sine_basis_controls(params, self.steps)

    def simulate(self, params):
        """The rollout (every node saved: the running cost reads them all)."""
        p = self.problem
        return simulate(
            p.system,
            p.method,
            p.state0,
            p.dt,
            p.steps,
            controls=self.controls(params),
            checkpoint=self.checkpoint,
            check_inputs=False,
        )

    def loss(self, params):
        """The problem's cost of the controls (:meth:`OptimalControlProblem.cost`)."""
        return self.problem.cost(self.simulate(params).states, self.controls(params))


def _shooting_weights(weight, duration, dim, dtype):
    """Terminal weights of ``w (‖log(g*⁻¹ g)‖² + T²|ξ|²)`` as ``½ Σ w_i r_i²`` of ``(log, ξ)``."""
    return jnp.asarray([2 * weight] * dim + [2 * weight * duration**2] * dim, dtype)


class AttitudeManeuver(SineShooting):
    """Rest-to-rest attitude manoeuvre of a rigid body by body torques, posed for shooting:
    :func:`attitude_problem` (no torque limits, the target as a penalty) with sine-mode torques
    through the forced LGVI (Lee, Leok & McClamroch's discrete Euler equations with the control
    in the discrete Lagrange–d'Alembert principle).

    Loss: ``½∫|u|² dt + w (‖log(R_target⁻¹ R(T))‖² + T²|Ω(T)|²)``; the penalty weight ``w`` makes
    the terminal error ``O(1/w)`` (documented initial guess: ``c = 0``, no torque).
    """

    def __init__(
        self,
        inertia=(1.0, 2.0, 3.0),
        R_target=None,
        R0=None,
        duration: float = 4.0,
        steps: int = 200,
        modes: int = 6,
        weight: float = 1e6,
        checkpoint: bool = True,
    ):
        dtype = jnp.result_type(float)
        w = _shooting_weights(float(weight), float(duration), 3, dtype)
        prob = attitude_problem(
            torque_max=None,
            inertia=inertia,
            duration=duration,
            steps=steps,
            method=LGVI(),
            exact_target=False,
            weight=w,
        )
        if R_target is not None:
            prob = eqx.tree_at(
                lambda p: p.terminal_cost.residual.target, prob, jnp.asarray(R_target, dtype)
            )
        if R0 is not None:
            prob = eqx.tree_at(lambda p: p.state0.R, prob, jnp.asarray(R0, dtype))
        self.problem, self.modes, self.checkpoint = prob, modes, checkpoint

    @property
    def R_target(self):
        return self.problem.terminal_cost.residual.target

    @property
    def R0(self):
        return self.problem.state0.R

    def errors(self, params) -> dict:
        """``{"angle": rad, "rate": |Ω(T)| rad/s, "effort"}`` of the LGVI solution."""
        final = self.simulate(params).final_state
        return {
            "angle": group_distance(SO3, final.R, self.R_target, squared=False),
            "rate": jnp.linalg.norm(self.system.velocity(final.Pi)),
            "effort": control_effort(self.controls(params), self.dt),
        }


class PoseManeuver(SineShooting):
    """Rest-to-rest manoeuvre of a free rigid body on SE(3) to a target pose by body wrenches
    ``(torque, force)``, posed for shooting: :func:`pose_problem` (no limits, the target as a
    penalty) with sine-mode wrenches.  Loss: ``½∫|u|² dt + w (‖log(g_target⁻¹ g(T))‖² +
    T²|ξ(T)|²)`` (rotation in rad, translation in length units; initial guess ``c = 0``).
    """

    def __init__(
        self,
        mass=2.0,
        inertia=(1.0, 2.0, 3.0),
        g_target=None,
        duration: float = 4.0,
        steps: int = 100,
        modes: int = 5,
        weight: float = 1e6,
        checkpoint: bool = True,
    ):
        dtype = jnp.result_type(float)
        prob = pose_problem(
            mass=mass,
            inertia=inertia,
            target=g_target,
            duration=duration,
            steps=steps,
            method=LGVI(),
            exact_target=False,
            weight=_shooting_weights(float(weight), float(duration), 6, dtype),
        )
        self.problem, self.modes, self.checkpoint = prob, modes, checkpoint

    @property
    def g_target(self):
        return self.problem.terminal_cost.residual.target

    @property
    def g0(self):
        return self.problem.state0.g

    def errors(self, params) -> dict:
        final = self.simulate(params).final_state
        R, x = SE3.rotation(final.g), SE3.translation(final.g)
        Rt, xt = SE3.rotation(self.g_target), SE3.translation(self.g_target)
        return {
            "angle": group_distance(SO3, R, Rt, squared=False),
            "position": jnp.linalg.norm(x - xt),
            "rate": jnp.linalg.norm(self.system.velocity(final.mu)),
            "effort": control_effort(self.controls(params), self.dt),
        }


def _save_every(steps: int) -> int:
    """The divisor of ``steps`` closest to ``sqrt(steps)`` (checkpointing: memory ``O(sqrt)``)."""
    r = math.sqrt(steps)
    return min((d for d in range(1, steps + 1) if steps % d == 0), key=lambda d: abs(d - r))


def _reconstruct(group, side, g0, xi, duration, steps, checkpoint):
    every = _save_every(steps) if checkpoint else 1
    return simulate(
        KinematicSystem(group, side),
        Magnus4(),
        KinematicState(g0),
        duration / steps,
        steps,
        controls=xi,
        save_every=every,
        checkpoint=checkpoint,
        check_inputs=False,
    )


# --- the physical models of the worked problems, each defined once -------------------------------
# BallOnPlate and rolling_ball_problem pose one physical problem (a ball rolling on a plate), and
# SpacecraftReorientation and spacecraft_problem another (a robot rolling inside a spacecraft),
# for two kinds of solver: the classes parameterize a closed base loop by Fourier modes for
# first-order shooting (optimize), the functions take the base velocity on each interval as the
# control of an OptimalControlProblem (solve_ocp, run_mpc).  Both build their model, and the
# defaults of its physical parameters, from the pieces below.

#: physical parameters of the rolling ball (:func:`geomjax.reconstruction.ball_on_turntable`):
#: its radius, and the axis of the default target attitudes.
ROLLING_BALL = dict(radius=1.0, axis=(1.0, -1.0, 2.0))
#: physical parameters of the robot inside the spacecraft
#: (:func:`geomjax.reconstruction.ball_in_ball`).
SPACECRAFT = dict(mass_big=10.0, mass_small=1.0, radius_big=1.0, radius_small=0.2)


def _ball_system(radius, table_rate, dtype):
    """The rolling ball driven by its contact-point velocity: ``ball_on_turntable`` as a
    :class:`~geomjax.reconstruction.BaseVelocitySystem` (state ``(g, x)``, ``g = R⁻¹``)."""
    from ..reconstruction.examples import ball_on_turntable

    model = ball_on_turntable(
        rate=jnp.asarray(table_rate, dtype), radius=jnp.asarray(radius, dtype)
    )
    return BaseVelocitySystem(model)


def _ball_attitude(angle, dtype):
    """``exp(angle n̂)`` about the unit axis of ``ROLLING_BALL["axis"]``: the default targets."""
    axis = jnp.asarray(ROLLING_BALL["axis"], dtype)
    return SO3.from_axis_angle(axis / jnp.linalg.norm(axis), jnp.asarray(angle, dtype))


def _spacecraft_system(mass_big, mass_small, radius_big, radius_small, dtype=None):
    """The robot rolling inside the spacecraft: :func:`geomjax.reconstruction.ball_in_ball`
    (polar base chart) with its parameters in ``dtype``."""
    from ..reconstruction.examples import ball_in_ball

    dtype = dtype or jnp.result_type(float)
    f = lambda v: jnp.asarray(v, dtype)  # noqa: E731
    return ball_in_ball(f(mass_big), f(mass_small), f(radius_big), f(radius_small))


# --- example 2: ball rolling on a fixed plate ------------------------------------------------------
class BallOnPlate(eqx.Module):
    """A ball of radius ``a`` rolling without slipping or spinning (about the vertical) on a fixed
    plane, its contact point following a closed loop ``x(t)`` in the plane.

    No slip gives the centre velocity ``ẋ = ω × a e_z``; no spin gives ``ω·e_z = 0``; hence
    ``ω = e_z × ẋ / a`` and the attitude solves the right-invariant equation ``Ṙ = hat(ω) R`` — the
    horizontal lift of the contact curve.  A closed loop brings the ball back to its start; its
    holonomy is the orientation change.  Parameters: a :class:`FourierLoop` in R² traversed with the
    rest-to-rest time law; loss ``‖log(R_target⁻¹ R(T))‖² + effort_weight ½∫|ẋ|² dt``.
    Documented initial guess: the circle of radius 1 around the origin (``modes`` Fourier modes);
    default target ``exp(1.0 n̂)``, ``n = (1, −1, 2)/√6``.

    The model is :func:`rolling_ball_problem`'s (``ball_on_turntable`` with the table at rest,
    :data:`ROLLING_BALL`): ``ω`` is its horizontal lift of the contact velocity
    (:meth:`spatial_angular_velocity`).  Which to use:
    this class for first-order shooting with :func:`~geomjax.control.optimize` over a smooth closed
    loop (few parameters, the loop closed by construction, the attitude only);
    :func:`rolling_ball_problem` for :func:`~geomjax.control.trajopt.solve_ocp` and
    :func:`~geomjax.control.run_mpc` (one contact velocity per interval, bounds on it, a turntable,
    the attitude and the position as targets).
    """

    radius: float = eqx.field(static=True)
    R_target: jax.Array
    duration: float = eqx.field(static=True)
    steps: int = eqx.field(static=True)
    modes: int = eqx.field(static=True)
    effort_weight: float = eqx.field(static=True)
    checkpoint: bool = eqx.field(static=True)

    def __init__(
        self,
        radius=ROLLING_BALL["radius"],
        R_target=None,
        duration=2.0,
        steps=100,
        modes=3,
        effort_weight=0.0,
        checkpoint=True,
    ):
        dtype = jnp.result_type(float)
        if R_target is None:
            R_target = _ball_attitude(1.0, dtype)
        self.radius = float(radius)
        self.R_target = jnp.asarray(R_target, dtype)
        self.duration, self.steps, self.modes = float(duration), steps, modes
        self.effort_weight, self.checkpoint = float(effort_weight), checkpoint

    def initial_params(self):
        return FourierLoop.circle(jnp.zeros(2, self.R_target.dtype), 1.0, modes=self.modes)

    def trajectory(self, loop):
        return Trajectory(loop, self.duration)

    def spatial_angular_velocity(self, v):
        """``ω = e_z × v / a`` for the contact (= centre) velocity ``v`` ``(..., 2)``: the rolling
        constraint of :func:`rolling_ball_problem`'s model (``ball_on_turntable``) on a fixed
        plate, solved in closed form (its horizontal lift, whose body velocity of ``g = R⁻¹`` is
        ``−ω``, through the saddle-point solve compiles 3–4× longer in a gradient of the loss;
        a test checks the two agree)."""
        return jnp.stack([-v[..., 1], v[..., 0], jnp.zeros_like(v[..., 0])], -1) / self.radius

    def simulate(self, loop):
        traj = self.trajectory(loop)
        ts = gauss_times(self.duration, self.steps, self.R_target.dtype)
        v = jax.vmap(jax.vmap(traj.velocity))(ts)
        xi = self.spatial_angular_velocity(v)
        R0 = jnp.eye(3, dtype=self.R_target.dtype)
        return _reconstruct(SO3, "right", R0, xi, self.duration, self.steps, self.checkpoint)

    def effort(self, loop):
        traj = self.trajectory(loop)
        h = self.duration / self.steps
        ts = h * (jnp.arange(self.steps, dtype=self.R_target.dtype) + 0.5)
        return path_energy(jax.vmap(traj.velocity)(ts), h)

    def loss(self, loop):
        R = self.simulate(loop).final_state.g
        return group_distance(SO3, R, self.R_target) + self.effort_weight * self.effort(loop)

    def errors(self, loop) -> dict:
        R = self.simulate(loop).final_state.g
        x = self.trajectory(loop)
        return {
            "angle": group_distance(SO3, R, self.R_target, squared=False),
            "position": jnp.linalg.norm(x(self.duration) - x(0.0)),
        }


# --- example 3: zero-angular-momentum reorientation by shape change -------------------------------
class ShapeReorientation(eqx.Module):
    """A free body (inertia ``I_body`` about its centre of mass, SO(3) attitude ``R``) carrying
    ``n`` point masses ``m_i`` that it moves along prescribed body-frame positions ``r_i(t)``
    (its shape); zero total angular momentum, no external forces (falling-cat type).

    With the body's centre of mass at the system's centre of mass (the masses move in pairs
    ``r, −r`` — "linked" — so that their centre stays at the body's), the total angular momentum
    in body coordinates is ``I_loc(r) Ω + Σ m_i r_i × ṙ_i = 0``, ``I_loc = I_body + Σ m_i
    (|r_i|² 1 − r_i r_iᵀ)``; hence ``Ω = −I_loc⁻¹ Σ m_i r_i × ṙ_i`` and ``Ṙ = R hat(Ω)`` (the
    mechanical connection; a closed shape loop gives the geometric phase).

    Parameters: a :class:`FourierLoop` in R^{3p} (the positions of the ``p`` pairs), rest-to-rest
    time law; loss ``‖log(R_target⁻¹ R(T))‖² + effort_weight ½∫|ṙ|² dt``.  Documented initial
    guess: :meth:`initial_params` (each pair on a small circle in a coordinate plane).
    """

    inertia: jax.Array
    masses: jax.Array
    R_target: jax.Array
    duration: float = eqx.field(static=True)
    steps: int = eqx.field(static=True)
    modes: int = eqx.field(static=True)
    effort_weight: float = eqx.field(static=True)
    checkpoint: bool = eqx.field(static=True)

    def __init__(
        self,
        inertia=(1.0, 1.5, 2.0),
        masses=(0.5, 0.5),
        R_target=None,
        duration=2.0,
        steps=100,
        modes=2,
        effort_weight=0.0,
        checkpoint=True,
    ):
        dtype = jnp.result_type(float)
        self.inertia = jnp.diag(jnp.asarray(inertia, dtype))
        self.masses = jnp.asarray(masses, dtype)
        if self.masses.ndim != 1:
            raise ValueError("ShapeReorientation: 'masses' must be (p,), one mass per pair")
        if R_target is None:
            R_target = SO3.from_axis_angle(
                jnp.array([0.0, 0.0, 1.0], dtype), jnp.asarray(0.5, dtype)
            )
        self.R_target = jnp.asarray(R_target, dtype)
        self.duration, self.steps, self.modes = float(duration), steps, modes
        self.effort_weight, self.checkpoint = float(effort_weight), checkpoint

    @property
    def pairs(self) -> int:
        return self.masses.shape[0]

    def initial_params(self):
        """Pair ``i`` circles (radius 0.3) around ``(1, 0, 0)``-type offsets in a coordinate
        plane: pair 0 around ``e_x`` in the x–y plane, pair 1 around ``e_y`` in the y–z plane."""
        dtype = self.R_target.dtype
        p = self.pairs
        center = jnp.zeros(3 * p, dtype)
        cos = jnp.zeros((self.modes, 3 * p), dtype)
        sin = jnp.zeros((self.modes, 3 * p), dtype)
        for i in range(p):
            a, b = i % 3, (i + 1) % 3
            center = center.at[3 * i + a].set(1.0)
            cos = cos.at[0, 3 * i + a].set(0.3)
            sin = sin.at[0, 3 * i + b].set(0.3)
        return FourierLoop(center, cos, sin)

    def body_velocity(self, r, rdot):
        """``Ω = −I_loc(r)⁻¹ Σ 2 m_i r_i × ṙ_i`` (each pair ``±r_i`` counts twice) ``(3,)``."""
        r = r.reshape(-1, 3)
        rdot = rdot.reshape(-1, 3)
        m2 = 2 * self.masses[:, None, None]
        eye = jnp.eye(3, dtype=r.dtype)
        Iloc = self.inertia + jnp.sum(
            m2 * (jnp.sum(r**2, -1)[:, None, None] * eye - r[:, :, None] * r[:, None, :]), 0
        )
        J = jnp.sum(2 * self.masses[:, None] * jnp.cross(r, rdot), 0)
        return -jnp.linalg.solve(Iloc, J)

    def simulate(self, loop):
        traj = Trajectory(loop, self.duration)
        ts = gauss_times(self.duration, self.steps, self.R_target.dtype)
        xi = jax.vmap(jax.vmap(lambda t: self.body_velocity(traj(t), traj.velocity(t))))(ts)
        R0 = jnp.eye(3, dtype=self.R_target.dtype)
        return _reconstruct(SO3, "left", R0, xi, self.duration, self.steps, self.checkpoint)

    def effort(self, loop):
        traj = Trajectory(loop, self.duration)
        h = self.duration / self.steps
        ts = h * (jnp.arange(self.steps, dtype=self.R_target.dtype) + 0.5)
        return path_energy(jax.vmap(traj.velocity)(ts), h)

    def loss(self, loop):
        R = self.simulate(loop).final_state.g
        return group_distance(SO3, R, self.R_target) + self.effort_weight * self.effort(loop)

    def errors(self, loop) -> dict:
        R = self.simulate(loop).final_state.g
        return {"angle": group_distance(SO3, R, self.R_target, squared=False)}


# --- example 1: spacecraft reoriented by an internal robot (Cabrera §5.3) -----------------------
def _evaluate_curve(traj, t):
    """Base curve of a :class:`Trajectory` (one module-level function: compiled once)."""
    return traj(t)


class SpacecraftReorientation(eqx.Module):
    """A small ball rolling without slipping inside a free big ball (Cabrera §5.3, a robot inside
    a spacecraft; :func:`geomjax.reconstruction.ball_in_ball` with the corrected Lagrangian).  With
    zero total angular momentum and no initial spin about the contact normal the motion is
    geometric (conventions notes): the attitude change of the big ball after a closed path of the
    small one, as seen from the big one, is the holonomy of that path, computed with
    :class:`geomjax.reconstruction.HorizontalLift` through :func:`geomjax.simulate`.

    Parameters: a :class:`FourierLoop` in the polar chart ``(θ, φ)`` of the small ball's centre
    (the chart of ``ball_in_ball``'s section, singular only at ``θ = π``), rest-to-rest time law;
    loss ``‖log(R_target⁻¹ R₁(T))‖²``.  Default target: the holonomy of a reference loop
    (:meth:`reference_loop`), so it is reachable; documented initial guess: the circle
    ``θ = 0.8 + 0.3 cos 2πs``, ``φ = 0.3 sin 2πs`` (:meth:`initial_params`), which misses it by
    0.023 rad.

    The model is :func:`spacecraft_problem`'s (``ball_in_ball`` with :data:`SPACECRAFT`'s
    parameters).  Which to use: this class for first-order shooting with
    :func:`~geomjax.control.optimize` over a smooth closed loop (the loop closed by construction,
    the horizontal lift by :class:`~geomjax.reconstruction.HorizontalLift`);
    :func:`spacecraft_problem` for :func:`~geomjax.control.trajopt.solve_ocp` and
    :func:`~geomjax.control.run_mpc` (one base velocity per interval, bounds on it, the return to
    the start as a terminal constraint).  Their default targets differ: each is the holonomy of
    its own reference loop.
    """

    system: object
    R_target: jax.Array
    duration: float = eqx.field(static=True)
    steps: int = eqx.field(static=True)
    modes: int = eqx.field(static=True)

    def __init__(
        self,
        mass_big=SPACECRAFT["mass_big"],
        mass_small=SPACECRAFT["mass_small"],
        radius_big=SPACECRAFT["radius_big"],
        radius_small=SPACECRAFT["radius_small"],
        R_target=None,
        duration=2.0,
        steps=60,
        modes=2,
    ):
        self.system = _spacecraft_system(mass_big, mass_small, radius_big, radius_small)
        self.duration, self.steps, self.modes = float(duration), steps, modes
        if R_target is None:
            R_target = self.final_attitude(self.reference_loop())
        self.R_target = jnp.asarray(R_target)

    def reference_loop(self):
        """The loop whose holonomy is the default target."""
        dtype = jnp.result_type(float)
        cos = jnp.zeros((self.modes, 2), dtype).at[0, 0].set(0.3)
        sin = jnp.zeros((self.modes, 2), dtype).at[0, 1].set(0.5)
        if self.modes > 1:
            cos = cos.at[1, 1].set(0.1)
            sin = sin.at[1, 0].set(0.05)
        return FourierLoop(jnp.array([0.8, 0.0], dtype), cos, sin)

    def initial_params(self):
        return FourierLoop.circle(
            jnp.array([0.8, 0.0], jnp.result_type(float)), 0.3, modes=self.modes
        )

    def simulate(self, loop):
        """Solution on ``SO(3) × SO(3)`` (big-ball attitude ``R₁``, small-ball gauge ``g₃``)."""
        from ..reconstruction import HorizontalLift, Reconstruction, reconstruct

        traj = Trajectory(loop, self.duration)
        rec = Reconstruction(self.system, _evaluate_curve, params=traj)
        return reconstruct(rec, self.duration, self.steps, method=HorizontalLift())

    def final_attitude(self, loop):
        return self.simulate(loop).final_state.g[0]

    def loss(self, loop):
        return group_distance(SO3, self.final_attitude(loop), self.R_target)

    def errors(self, loop) -> dict:
        return {
            "angle": group_distance(SO3, self.final_attitude(loop), self.R_target, squared=False)
        }


# --- optimal control problems for the DDP solvers (geomjax.control.trajopt) ----------------------
#: crocoddyl's ``examples/quadrotor_fwddyn.py`` (hector quadrotor of example-robot-data):
#: mass, principal inertia, arm length ``d_cog``, thrust and moment coefficients ``cf, cm``,
#: thrust limits ``(l_lim, u_lim)`` of its bounded variant, time step and horizon.
QUADROTOR = dict(
    mass=1.477,
    inertia=(0.01152, 0.01152, 0.0218),
    d_cog=0.1525,
    cf=6.6e-5,
    cm=1e-6,
    thrust_min=0.1,
    thrust_max=5.0,
    dt=3e-2,
    steps=33,
    gravity=9.81,
)


def quadrotor_actuation(d_cog=QUADROTOR["d_cog"], cf=QUADROTOR["cf"], cm=QUADROTOR["cm"]):
    """``(6, 4)``: rotor thrusts → body wrench ``(torque, force)`` (geomjax's (ω, v) order;
    crocoddyl's ``tau_f`` with its rows swapped: it orders the force first)."""
    k = cm / cf
    force = [[0.0] * 4, [0.0] * 4, [1.0] * 4]
    torque = [[0.0, d_cog, 0.0, -d_cog], [-d_cog, 0.0, d_cog, 0.0], [-k, k, -k, k]]
    return jnp.asarray(torque + force, jnp.result_type(float))


def quadrotor_system(mass=None, inertia=None, dtype=None, *, mass_scale=1.0):
    """The quadrotor as a :class:`~geomjax.RigidBodySE3` under gravity, its one mass in both
    places: the body's inertia (``m`` in the generalized inertia) and the gravity potential
    (``m g z``).  ``mass`` (default crocoddyl's 1.477 kg) times ``mass_scale``; ``inertia`` the
    principal inertia about the centre of mass (default crocoddyl's, unchanged by the mass: a
    payload at the centre of mass).  E.g. the plant of a model 10 % too light:
    ``quadrotor_system(mass_scale=1.1)``."""
    from ..systems.potentials import SE3Gravity

    c = QUADROTOR
    dtype = dtype or jnp.result_type(float)
    base = c["mass"] if mass is None else mass
    for name, v in (("mass", base), ("mass_scale", mass_scale)):
        if np.shape(v) != () or (not is_traced(v) and not float(v) > 0):
            raise ValueError(
                f"quadrotor_system: argument '{name}' must be a positive scalar, got {v!r}"
            )
    m = jnp.asarray(base, dtype) * jnp.asarray(mass_scale, dtype)
    inertia = jnp.asarray(c["inertia"] if inertia is None else inertia, dtype)
    if inertia.shape != (3,):
        raise ValueError(
            f"quadrotor_system: argument 'inertia' must have shape (3,), got {inertia.shape}"
        )
    return RigidBodySE3(m, inertia, potential=SE3Gravity(m, jnp.asarray(c["gravity"], dtype)))


class _QuadrotorResidual(eqx.Module):
    """crocoddyl's running residuals stacked: xReg ``(log g, ξ)`` (12), uReg ``u`` (4),
    trackPose ``log(g_target⁻¹ g)`` (6)."""

    target: jax.Array
    system: RigidBodySE3

    def __call__(self, t, x, u):
        xi = self.system.velocity(x.mu)
        # both logarithms as one batched call: one traced copy of SE(3)'s log (and of its
        # derivatives in the solvers' linearization) instead of two, the same values
        logs = SE3.log(jnp.stack([x.g, SE3.between(self.target, x.g)]))
        return jnp.concatenate([logs[0], xi, u, logs[1]])


class _PoseResidual(eqx.Module):
    target: jax.Array

    def __call__(self, x):
        return SE3.rminus(x.g, self.target)


def quadrotor_problem(
    bounded: bool = False,
    method=None,
    target=(1.0, 0.0, 1.0),
    dtype=None,
    *,
    system=None,
    actuation=None,
    mass=None,
    tracking_weight=1e-2,
):
    """crocoddyl's quadrotor example (``examples/quadrotor_fwddyn.py``; ``bounded=True``: the
    thrust limits ``0.1 ≤ f_i ≤ 5`` of ``quadrotor_ubound.py``) as an
    :class:`~geomjax.control.trajopt.OptimalControlProblem`.

    Hector quadrotor (mass 1.477 kg, inertia diag(0.01152, 0.01152, 0.0218)) on SE(3) with
    gravity, four rotor thrusts through :func:`quadrotor_actuation`; from rest at the origin to
    the pose ``(I, target)`` in 33 steps of 0.03 s.  Running cost ``dt (1e-6 xReg + 1e-6 ½|u|² +
    1e-2 ½|log(g*⁻¹ g)|²)``, terminal ``3 · ½|log(g*⁻¹ g)|²`` (crocoddyl's weights).  Default method:
    :class:`~geomjax.integrators.SemiImplicitEuler` (crocoddyl's integrator); any geomjax method
    (e.g. :class:`~geomjax.LGVI`) can be passed.  ``system`` (a :class:`~geomjax.RigidBodySE3`
    with gravity) and ``actuation`` (the ``(6, 4)`` thrust map) replace crocoddyl's, e.g. by an
    identified model (:class:`geomjax.learn.problems.QuadrotorModel`).  ``mass``: the model's
    mass (kg), in its inertia and its gravity alike (:func:`quadrotor_system`).
    ``tracking_weight``: the running pose-tracking weight (crocoddyl's trackPose, 1e-2); under
    model predictive control a larger one (0.1) pulls the plant to the target sooner (see the
    control guide's MPC section)."""
    from .trajopt import Actuated, OptimalControlProblem, ResidualCost

    c = QUADROTOR
    dtype = dtype or jnp.result_type(float)
    if system is None:
        try:
            system = quadrotor_system(mass, dtype=dtype)
        except ValueError as e:
            raise ValueError(f"quadrotor_problem: {e}".replace("quadrotor_system: ", "")) from e
    elif mass is not None:
        raise ValueError(
            "quadrotor_problem: pass argument 'mass' or 'system', not both (build the system "
            "with quadrotor_system(mass=...))"
        )
    elif not isinstance(system, RigidBodySE3):
        raise ValueError(
            f"quadrotor_problem: argument 'system' must be a RigidBodySE3, got {type(system).__name__}"
        )
    B = quadrotor_actuation() if actuation is None else jnp.asarray(actuation)
    if B.shape != (6, 4):
        raise ValueError(
            f"quadrotor_problem: argument 'actuation' must have shape (6, 4), got {B.shape}"
        )
    method = Actuated(SemiImplicitEuler() if method is None else method, B.astype(dtype))
    g_target = SE3.from_rotation_translation(jnp.eye(3, dtype=dtype), jnp.asarray(target, dtype))
    # crocoddyl: xReg weight 1e-6 with activation weights 1e3 (rotation, velocity) and 0.1
    # (translation); uReg 1e-6; trackPose 1e-2; goalPose (terminal) 3
    if np.shape(tracking_weight) != () or (
        not is_traced(tracking_weight) and not float(tracking_weight) >= 0
    ):
        raise ValueError(
            "quadrotor_problem: argument 'tracking_weight' must be a non-negative scalar, got "
            f"{tracking_weight!r}"
        )
    w = jnp.asarray([1e-3] * 3 + [1e-7] * 3 + [1e-3] * 6 + [1e-6] * 4 + [1.0] * 6, dtype)
    w = w.at[-6:].multiply(jnp.asarray(tracking_weight, dtype))
    stage = ResidualCost(_QuadrotorResidual(g_target, system), w)
    terminal = ResidualCost(_PoseResidual(g_target), jnp.asarray(3.0, dtype), terminal=True)
    x0 = LieGroupState(jnp.eye(4, dtype=dtype), jnp.zeros(6, dtype))
    kw = {}
    if bounded:
        kw = dict(
            lower=jnp.full(4, c["thrust_min"], dtype), upper=jnp.full(4, c["thrust_max"], dtype)
        )
    return OptimalControlProblem(
        system,
        method,
        x0,
        c["dt"],
        c["steps"],
        stage,
        terminal,
        control_dim=4,
        **kw,
    )


class _Effort(eqx.Module):
    weight: float = 1.0

    def __call__(self, t, x, u):
        return self.weight * 0.5 * jnp.sum(u**2)


class _AttitudeTarget(eqx.Module):
    """``(log(R*⁻¹ R), Ω)`` ``(6,)``: zero at rest at the target attitude."""

    target: jax.Array
    system: RigidBody

    def __call__(self, x):
        return jnp.concatenate([SO3.rminus(x.R, self.target), self.system.velocity(x.Pi)])


def _limits_and_target(limit, m, dtype, residual, exact, weight):
    """Symmetric control limits ``|u_i| ≤ limit`` (None: none) and the target either as a
    terminal equality (``exact``) or as the penalty ``weight/2 |residual|²``: ``(kw, terminal)``."""
    from .trajopt import ResidualCost

    kw = {}
    if limit is not None:
        kw = dict(lower=jnp.full(m, -limit, dtype), upper=jnp.full(m, limit, dtype))
    if exact:
        kw["terminal_equality"] = residual
        return kw, None
    return kw, ResidualCost(residual, weight, terminal=True)


def attitude_problem(
    torque_max=0.8,
    inertia=(1.0, 2.0, 3.0),
    angle=1.5,
    duration=4.0,
    steps=40,
    method=None,
    exact_target: bool = True,
    weight: float = 1e3,
    dtype=None,
    *,
    axis=(1.0, 2.0, -1.0),
):
    """Rest-to-rest reorientation of a rigid body by body torques with per-axis limits
    ``|u_i| ≤ torque_max`` (pass None for no limits): minimum ``½∫|u|² dt``, from ``R = I`` at
    rest to rest at ``exp(angle · n̂)``, ``n̂ = axis/|axis|`` (default ``(1, 2, −1)/√6``; other
    axes give held-out targets).  ``exact_target``: the final state as a
    terminal equality (solve with :class:`~geomjax.control.trajopt.AugmentedLagrangian`);
    otherwise the penalty ``weight/2 (|log(R*⁻¹R)|² + |Ω|²)``.  Default method: :class:`~geomjax.LGVI`.
    The default limit 0.8 is active and feasible: the minimum-effort single-axis profiles
    ``u_i = 6 θ_i I_i/T² (1 − 2t/T)`` peak at (0.23, 0.92, 0.69) for the rotation vector
    ``θ = 1.5 (1, 2, −1)/√6`` and inertia (1, 2, 3), while bang-bang needs ``4 I_i |θ_i|/T² =
    (0.15, 0.61, 0.46)`` (a limit below that makes the exact target unreachable: the augmented
    Lagrangian then reports ``constraints_not_met``)."""
    from .trajopt import OptimalControlProblem

    dtype = dtype or jnp.result_type(float)
    system = RigidBody(jnp.asarray(inertia, dtype))
    axis = jnp.asarray(axis, dtype)
    if axis.shape != (3,):
        raise ValueError(
            f"attitude_problem: argument 'axis' must have shape (3,), got {axis.shape}"
        )
    if not is_traced(axis) and not float(jnp.linalg.norm(axis)) > 0:
        raise ValueError("attitude_problem: argument 'axis' must be a non-zero vector")
    axis = axis / jnp.sqrt(jnp.sum(axis**2))  # the default: (1, 2, -1)/√6 to the last bit
    Rt = SO3.from_axis_angle(axis, jnp.asarray(angle, dtype))
    x0 = RigidBodyState(jnp.eye(3, dtype=dtype), jnp.zeros(3, dtype))
    res = _AttitudeTarget(Rt, system)
    kw, terminal = _limits_and_target(torque_max, 3, dtype, res, exact_target, weight)
    return OptimalControlProblem(
        system,
        LGVI() if method is None else method,
        x0,
        _time_step(duration, steps, "attitude_problem"),
        steps,
        _Effort(),
        terminal,
        control_dim=3,
        **kw,
    )


class _PoseTarget(eqx.Module):
    """``(log(g*⁻¹ g), ξ)`` ``(12,)``: zero at rest at the target pose."""

    target: jax.Array
    system: RigidBodySE3

    def __call__(self, x):
        return jnp.concatenate([SE3.rminus(x.g, self.target), self.system.velocity(x.mu)])


def pose_problem(
    wrench_max=None,
    mass=2.0,
    inertia=(1.0, 2.0, 3.0),
    target=None,
    duration=4.0,
    steps=100,
    method=None,
    exact_target: bool = False,
    weight=1e3,
    dtype=None,
):
    """Rest-to-rest manoeuvre of a free rigid body on SE(3) (:class:`geomjax.RigidBodySE3`, centre
    of mass at the body origin, no gravity) by body wrenches ``u = (torque, force)`` with
    per-entry limits ``|u_i| ≤ wrench_max`` (None: none): minimum ``½∫|u|² dt`` from rest at the
    identity to rest at ``target`` (default: rotation by 1 rad about ``(0, 1, 1)/√2``,
    translation ``(1, −0.5, 0.3)``).  ``exact_target``: the final state as a terminal equality
    (solve with :class:`~geomjax.control.trajopt.AugmentedLagrangian`); otherwise the penalty
    ``½ Σ w_i r_i²`` of ``r = (log(g*⁻¹ g), ξ)`` with ``weight`` a scalar or ``(12,)``.  Default
    method: :class:`~geomjax.LGVI`."""
    from .trajopt import OptimalControlProblem

    dtype = dtype or jnp.result_type(float)
    system = RigidBodySE3(jnp.asarray(mass, dtype), jnp.asarray(inertia, dtype))
    if target is None:
        axis = jnp.array([0.0, 1.0, 1.0], dtype) / math.sqrt(2.0)
        R = SO3.from_axis_angle(axis, jnp.asarray(1.0, dtype))
        target = SE3.from_rotation_translation(R, jnp.array([1.0, -0.5, 0.3], dtype))
    x0 = LieGroupState(jnp.eye(4, dtype=dtype), jnp.zeros(6, dtype))
    res = _PoseTarget(jnp.asarray(target, dtype), system)
    kw, terminal = _limits_and_target(wrench_max, 6, dtype, res, exact_target, weight)
    return OptimalControlProblem(
        system,
        LGVI() if method is None else method,
        x0,
        _time_step(duration, steps, "pose_problem"),
        steps,
        _Effort(),
        terminal,
        control_dim=6,
        **kw,
    )


class _CartPoleTerminal(eqx.Module):
    """``(q − q*, p)`` ``(4,)``: upright (``θ = π``) at ``x = 0``, at rest."""

    def __call__(self, x):
        q_target = jnp.array([0.0, jnp.pi], x.q.dtype)
        return jnp.concatenate([x.q - q_target, x.p])


class _CartPoleMetric(eqx.Module):
    mc: float = eqx.field(static=True)
    mp: float = eqx.field(static=True)
    l: float = eqx.field(static=True)

    def __call__(self, q):
        c = self.mp * self.l * jnp.cos(q[1])
        return jnp.array([[self.mc + self.mp, c], [c, self.mp * self.l**2]], q.dtype)


class _CartPolePotential(eqx.Module):
    mp: float = eqx.field(static=True)
    l: float = eqx.field(static=True)
    g: float = eqx.field(static=True)

    def __call__(self, q):
        return -self.mp * self.g * self.l * jnp.cos(q[1])


def _cartpole_force(t, q, qdot, u):
    if u is None:
        return jnp.zeros(2, q.dtype)
    return jnp.stack([u[0], jnp.zeros((), q.dtype)])


def cartpole_problem(
    force_max=6.0,
    mass_cart=1.0,
    mass_pole=0.3,
    length=0.5,
    gravity=9.81,
    duration=2.5,
    steps=50,
    exact_target: bool = True,
    weight: float = 1e3,
    method=None,
    dtype=None,
):
    """Cart-pole swing-up with a bounded horizontal force ``|u| ≤ force_max`` on the cart, a
    flat-space sanity case (:class:`~geomjax.variational.LagrangianSystem`, coordinates
    ``q = (x, θ)``, ``θ = 0`` hanging; :class:`~geomjax.DiscreteEulerLagrange` by default):

        L = ½ (m_c + m_p) ẋ² + m_p l ẋ θ̇ cos θ + ½ m_p l² θ̇² + m_p g l cos θ,   F = (u, 0).

    Minimum ``½∫u² dt`` from rest hanging to rest upright (``exact_target``: terminal equality;
    else the penalty ``weight/2 |(q − q*, p)|²``)."""
    from ..integrators.variational import DiscreteEulerLagrange
    from ..variational import LagrangianSystem, VariationalState
    from .trajopt import OptimalControlProblem

    dtype = dtype or jnp.result_type(float)
    mc, mp, l, g = (float(v) for v in (mass_cart, mass_pole, length, gravity))
    # module-level callables with static parameters: equal problems share one compiled program
    # (closures defined here would be new functions, recompiling every problem)
    system = LagrangianSystem(
        metric=_CartPoleMetric(mc, mp, l),
        potential=_CartPolePotential(mp, l, g),
        force=_cartpole_force,
        dim=2,
    )
    x0 = VariationalState(jnp.zeros(2, dtype), jnp.zeros(2, dtype), jnp.zeros(0, dtype))
    kw, terminal = _limits_and_target(
        force_max, 1, dtype, _CartPoleTerminal(), exact_target, weight
    )
    return OptimalControlProblem(
        system,
        DiscreteEulerLagrange() if method is None else method,
        x0,
        _time_step(duration, steps, "cartpole_problem"),
        steps,
        _Effort(),
        terminal,
        control_dim=1,
        **kw,
    )


# --- nonholonomic planning: the base velocity as the control ---------------------------------------
def loop_controls(steps: int, duration: float, radius=0.3, turns: int = 1, dtype=None):
    """Base velocities ``(steps, 2)`` of a closed polygonal loop: the zero-order-hold controls
    ``u_k = (c(t_{k+1}) − c(t_k))/h`` of the circle ``c(t) = r (cos 2πnt/T − 1, sin 2πnt/T)``
    (from the start point, counter-clockwise, ``n = turns``); they sum to zero (the base returns
    to its start exactly).  The documented initial guess of :func:`rolling_ball_problem` and
    :func:`spacecraft_problem`, whose attitude targets need a loop (zero controls are a saddle:
    the attitude change of a short path is first order in the displacement only)."""
    dtype = dtype or jnp.result_type(float)
    h = duration / steps
    s = 2 * math.pi * turns * jnp.arange(steps + 1, dtype=dtype) / steps
    c = radius * jnp.stack([jnp.cos(s) - 1.0, jnp.sin(s)], -1)
    return (c[1:] - c[:-1]) / h


class _BallTarget(eqx.Module):
    """``(log(R*⁻¹ R), x − x*)`` ``(5,)`` with the ball's attitude ``R = g⁻¹``."""

    attitude: jax.Array
    position: jax.Array

    def __call__(self, x):
        return jnp.concatenate([SO3.rminus(SO3.inverse(x.g), self.attitude), x.b - self.position])


def rolling_ball_problem(
    target_attitude=None,
    target_position=(0.5, 0.0),
    table_rate=0.0,
    radius=ROLLING_BALL["radius"],
    duration=2.0,
    steps=20,
    speed_max=None,
    exact_target: bool = True,
    weight: float = 1e3,
    dtype=None,
):
    """Nonholonomic planning for a ball rolling without slipping or spinning (about the vertical)
    on a plate, or on a turntable spinning at ``table_rate``: steer it from rest at the origin
    with attitude ``I`` to the attitude ``target_attitude`` (default ``exp(0.8 (1, −1, 2)/√6)``)
    AND the contact point ``target_position``, the control being the velocity ``u = ẋ`` of the
    contact point (:func:`geomjax.reconstruction.ball_on_turntable`, Cabrera §5.2, through
    :class:`~geomjax.reconstruction.BaseVelocitySystem` and :class:`~geomjax.reconstruction.LiftMagnus4`).

    Rolling (spatial ``ω``, radius ``a``, table rate ``Ω``): ``ẋ − a ω_y = −Ω y``,
    ``ẏ + a ω_x = Ω x``, ``ω_z = 0``, i.e. ``Ṙ = ω̂ R`` with ``ω = ((Ω x − ẏ)/a, (ẋ + Ω y)/a, 0)``
    (on a fixed plate the step is exact).  State ``(g, x)`` with ``g = R⁻¹`` (the group acts by
    ``R g⁻¹``).  Minimum ``½∫|ẋ|² dt`` subject to ``|ẋ_i| ≤ speed_max`` (None: no bound) and the
    final pose as a terminal equality (``exact_target``, solve with
    :class:`~geomjax.control.AugmentedLagrangian`) or the penalty ``weight/2 |(log(R*⁻¹R), x −
    x*)|²``.  Documented initial guess: :func:`loop_controls` (one loop of radius 0.3).

    The model (:data:`ROLLING_BALL`) is :class:`BallOnPlate`'s too; use that class for
    first-order shooting with :func:`~geomjax.control.optimize` over a smooth closed loop on a
    fixed plate, this problem for :func:`~geomjax.control.trajopt.solve_ocp` and
    :func:`~geomjax.control.run_mpc`."""
    dtype = dtype or jnp.result_type(float)
    system = _ball_system(radius, table_rate, dtype)
    if target_attitude is None:
        target_attitude = _ball_attitude(0.8, dtype)
    res = _BallTarget(jnp.asarray(target_attitude, dtype), jnp.asarray(target_position, dtype))
    x0 = BaseVelocityState(jnp.eye(3, dtype=dtype), jnp.zeros(2, dtype))
    return _base_velocity_problem(system, x0, res, duration, steps, speed_max, exact_target, weight)


def _base_velocity_problem(system, x0, residual, duration, steps, speed_max, exact, weight):
    """Minimum ``½∫|ḃ|² dt`` for a :class:`~geomjax.reconstruction.BaseVelocitySystem` (:class:`~geomjax.reconstruction.LiftMagnus4`) with the
    bounds ``|ḃ_i| ≤ speed_max`` and the terminal ``residual`` (equality or penalty)."""
    from .trajopt import LieGroupChart, OptimalControlProblem

    dtype, nb = x0.b.dtype, x0.b.shape[0]
    kw, terminal = _limits_and_target(speed_max, nb, dtype, residual, exact, weight)
    return OptimalControlProblem(
        system,
        LiftMagnus4(),
        x0,
        duration / steps,
        steps,
        _Effort(),
        terminal,
        control_dim=nb,
        chart=LieGroupChart(),
        **kw,
    )


@eqx.filter_jit
def _lift_final(system, x0, us, h):
    """Final state of :class:`~geomjax.reconstruction.LiftMagnus4` steps of ``h`` with the controls ``us``."""
    step = LiftMagnus4().step
    return jax.lax.fori_loop(0, us.shape[0], lambda k, x: step(system, x, h, us[k])[0], x0)


class _SpacecraftTarget(eqx.Module):
    """``(log(R*⁻¹ R₁), b − b₀)`` ``(5,)``: the spacecraft's attitude on target, the robot back
    at its start."""

    attitude: jax.Array
    base: jax.Array

    def __call__(self, x):
        return jnp.concatenate([SO3.rminus(x.g[0], self.attitude), x.b - self.base])


def spacecraft_problem(
    target_attitude=None,
    base0=(0.8, 0.0),
    mass_big=SPACECRAFT["mass_big"],
    mass_small=SPACECRAFT["mass_small"],
    radius_big=SPACECRAFT["radius_big"],
    radius_small=SPACECRAFT["radius_small"],
    duration=2.0,
    steps=20,
    speed_max=None,
    exact_target: bool = True,
    weight: float = 1e3,
    dtype=None,
):
    """Cabrera, *Base-controlled mechanical systems and geometric phases*, §5.3: a robot (small
    ball) rolling inside a spacecraft (free big ball) at zero angular momentum turns it to
    ``target_attitude`` (default: the holonomy of the loop ``loop_controls(steps, duration,
    radius=0.45)`` from ``base0``, about 0.03 rad, so it is reachable) and comes back to its
    start ``base0``: the geometric phase of a
    closed base path as a trajectory-optimization problem
    (:func:`geomjax.reconstruction.ball_in_ball` through :class:`~geomjax.reconstruction.BaseVelocitySystem` and
    :class:`~geomjax.reconstruction.LiftMagnus4`).

    State ``((R₁, g₃), b)``: spacecraft attitude, small-ball gauge, polar angles ``b = (θ, φ)`` of
    the robot's centre seen from the spacecraft; control the base velocity ``u = ḃ`` (rad/s),
    ``|u_i| ≤ speed_max`` (None: no bound).  Minimum ``½∫|ḃ|² dt`` with the terminal equality
    ``(log(R*⁻¹R₁), b − b₀) = 0`` (``exact_target``) or its penalty ``weight/2 |·|²``.  Documented
    initial guess: :func:`loop_controls`.

    The model (:data:`SPACECRAFT`) is :class:`SpacecraftReorientation`'s too; use that class for
    first-order shooting with :func:`~geomjax.control.optimize` over a smooth closed loop, this
    problem for :func:`~geomjax.control.trajopt.solve_ocp` and :func:`~geomjax.control.run_mpc`."""
    from ..lie import PowerGroup

    dtype = dtype or jnp.result_type(float)
    f = lambda v: jnp.asarray(v, dtype)  # noqa: E731
    system = BaseVelocitySystem(
        _spacecraft_system(mass_big, mass_small, radius_big, radius_small, dtype)
    )
    b0 = f(base0)
    x0 = BaseVelocityState(PowerGroup(SO3, 2).identity(dtype=dtype), b0)
    if target_attitude is None:  # the holonomy of a reference loop: reachable
        ref = loop_controls(steps, duration, radius=0.45, dtype=dtype)
        target_attitude = _lift_final(system, x0, ref, jnp.asarray(duration / steps, dtype)).g[0]
    res = _SpacecraftTarget(f(target_attitude), b0)
    return _base_velocity_problem(system, x0, res, duration, steps, speed_max, exact_target, weight)
