"""Identification of the physical parameters of a geomjax system from recorded motions.

The unknowns are (i) the parameters the user selects with ``where`` (as in
:func:`equinox.tree_at`), each moved through an unconstrained parameterization
(:mod:`geomjax.learn.parameterize`: an inertia stays SPD, a mass positive), and (ii) for every
shooting segment its initial configuration ``g_s = ĝ_s exp(δ_s)`` (``ĝ_s`` the measured sample)
and initial body velocity ``ξ_s``.  Every segment is integrated by the discrete flow of the
system (the LGVI by default) and compared with the measurements:

    r_data = log(g_pred(t_k)⁻¹ ĝ_k) / σ_g   (and (ξ_pred − ξ̂_k) / σ_ξ when velocities are given),
    r_cont = w · (log(g_end,s⁻¹ g_{s+1}), (ξ_end,s − ξ_{s+1}) h / σ_g)   (multiple shooting),

and ``Σ r²`` is minimized by Levenberg–Marquardt (or any optimistix solver).  Multiple shooting — segments tied
by continuity (Bock & Plitt, *A multiple shooting algorithm for direct solution of optimal control
problems*, IFAC 1984; for parameter estimation Bock, *Recent advances in parameter identification
techniques for ODE*, 1983) — keeps the problem well conditioned for long or chaotic records.

The covariance of the estimate is the Gauss–Newton one, ``C = s² (JᵀJ)⁻¹`` with
``s² = Σ r_data² / (m − p)`` (``m`` data residuals, ``p`` unknowns less the continuity
conditions), mapped to the physical parameters by the Jacobian of the parameterization (the delta
method).  A numerically rank-deficient Jacobian (e.g. inertia and potential scale together when no
input is known) raises a warning naming the parameters of the null direction, and the result's
status says so.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import types

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.eager import LEGACY_EMITTERS, top_level_options
from .._internal.warn import renamed, renamed_attribute, warn
from ..integrators import LGVI, NonholonomicVI, simulate
from ..results import ConvergenceError, Status
from . import parameterize as P
from .data import Recording, check_recording

__all__ = ["FitError", "FitResult", "fit_parameters", "fitting_loss", "select_leaves"]


class FitError(ConvergenceError):
    """A fit did not converge or is not identifiable (raised by :meth:`FitResult.check` and
    :meth:`ModelFit.check <geomjax.learn.ModelFit.check>`): a
    :class:`geomjax.results.ConvergenceError`, the error of every result's ``check()``."""


@dataclasses.dataclass(frozen=True)
class FitResult:
    """Result of :func:`fit_parameters`.

    Attributes:
        system: the system (or parametric model) with the fitted parameters in place.
        values: the fitted leaves, always a tuple in the order of ``where`` (also when ``where``
            selects one leaf: ``(I_fit,) = res.values``), each an array of its leaf's shape.
        std: their standard deviations, a tuple like ``values`` (same order and shapes): the
            square roots of the diagonal of ``covariance``, reshaped per leaf.
        covariance: ``(P, P)`` NumPy array, ``P`` the total number of entries of the fitted
            leaves: the covariance over the leaves flattened (row-major) and concatenated in the
            order of ``where``; leaf ``i`` occupies the rows and columns ``o_i : o_i + size_i``
            with ``o_i`` the sizes of the leaves before it summed.  It is the Gauss–Newton
            covariance of the unknowns (a pseudo-inverse: singular directions below the rank
            tolerance are dropped), marginal over the unknown initial states, mapped to the
            physical entries by the delta method.  An SPD ``(n, n)`` leaf counts all its ``n²``
            raw entries though it has ``n(n + 1)/2`` unconstrained coordinates: the entries
            ``(i, j)`` and ``(j, i)`` are the same random variable (equal ``std``, correlation
            1), so ``covariance`` is singular (rank at most the number of unconstrained
            coordinates) and cannot be inverted as it is; its block over the upper-triangle
            entries is invertible when the Jacobian has full rank.
        names: the leaves' paths in the system (``.inertia``, ``.potential.rho``).
        initial_states: per recording, the estimated state at its first sample.
        sigma: the residual scale ``s`` (≈ 1 when the given noise levels are right).
        cost: ``½ Σ r²`` at the solution.
        converged: whether the solver met its tolerances.
        rank_ratio: smallest / largest singular value of the column-scaled Jacobian.
        status: :class:`geomjax.results.Status`: ``CONVERGED``; ``MAX_ITERS`` (the solver did
            not converge within ``max_iters``), ``NONFINITE`` or ``RANK_DEFICIENT`` (the data do
            not determine the parameters separately: reported even when the solver converged).
        message: ``"converged"``, or a sentence saying what went wrong and what to change.
        iterations: solver iterations taken (``num_steps`` is a deprecated alias).
    """

    system: object
    values: tuple
    std: tuple
    covariance: np.ndarray
    names: tuple
    initial_states: list
    sigma: float
    cost: float
    converged: bool
    rank_ratio: float
    status: Status
    message: str
    iterations: int

    num_steps = renamed_attribute("FitResult", "num_steps", "iterations")

    @property
    def stop_reason(self) -> str:
        """The name of :attr:`status` (``"converged"``, ``"max_iters"``, ...)."""
        return Status(self.status).reason

    def check(self) -> FitResult:
        """Raise :class:`FitError` unless the fit converged with a full-rank Jacobian."""
        if self.status != Status.CONVERGED:
            raise FitError(f"fit_parameters: {self.message}")
        return self

    def z_scores(self, true_values) -> tuple:
        """``(estimate − truth) / std`` per leaf (for calibration studies)."""
        return tuple(
            (np.asarray(v) - np.asarray(t)) / np.asarray(s)
            for v, t, s in zip(self.values, true_values, self.std, strict=True)
        )


def select_leaves(system, where, name="where", who="fit_parameters"):
    """``(leaves, single, names)``: the leaves ``where(system)`` selects (a tuple), whether ``where``
    returned one leaf, and each leaf's path in ``system``.  ``ValueError`` naming ``where`` if a
    selected leaf is not a floating array."""
    if not callable(where):
        raise ValueError(f"{who}: argument '{name}' must be a function system -> leaf or tuple")
    try:
        sel = where(system)
    except Exception as e:
        raise ValueError(f"{who}: argument '{name}' failed on the system: {e}") from e
    single = not isinstance(sel, tuple | list)
    leaves = (sel,) if single else tuple(sel)
    paths = jax.tree_util.tree_flatten_with_path(system)[0]
    names = []
    for i, leaf in enumerate(leaves):
        if not (eqx.is_array(leaf) and jnp.issubdtype(leaf.dtype, jnp.floating)):
            raise ValueError(
                f"{who}: argument '{name}' must select floating arrays of the system; selection "
                f"{i} is {type(leaf).__name__}"
                + (f" of dtype {leaf.dtype}" if hasattr(leaf, "dtype") else "")
            )
        found = [jax.tree_util.keystr(p) for p, x in paths if x is leaf]
        names.append(found[0] if found else f"selection {i}")
    return leaves, single, tuple(names)


def _auto_kind(x) -> str:
    a = np.asarray(x)
    if a.ndim == 2 and a.shape[0] == a.shape[1] and a.shape[0] > 1:
        if np.allclose(a, a.T) and np.all(np.linalg.eigvalsh(0.5 * (a + a.T)) > 0):
            return "spd"
    return "free"


def _segments(N: int, L: int):
    """Index table ``(S, L+1)`` of sample indices per segment (clipped) and the data mask: each
    sample counted once (a segment's end sample belongs to the next segment)."""
    S = max(1, math.ceil((N - 1) / L))
    idx = np.arange(S)[:, None] * L + np.arange(L + 1)[None, :]
    valid = idx <= N - 1
    last = np.arange(S)[:, None] == S - 1
    mask = valid & ((np.arange(L + 1)[None, :] < L) | last)
    return S, np.minimum(idx, N - 1), mask


class _Slot:
    """A placeholder put where ``where`` points, to find the selected leaves' positions."""

    def __init__(self, i):
        self.i = i


def _positions(model, where, n, single):
    """Indices of the selected leaves among ``jax.tree_util.tree_leaves(model)``: fitted values
    are put back by position, so the compiled program does not depend on the ``where`` function
    (a new lambda per call would otherwise be a new program)."""
    slots = tuple(_Slot(i) for i in range(n))
    marked = eqx.tree_at(where, model, replace=slots[0] if single else slots)
    flat = jax.tree_util.tree_leaves(marked, is_leaf=lambda x: isinstance(x, _Slot))
    pos = {x.i: j for j, x in enumerate(flat) if isinstance(x, _Slot)}
    return tuple(pos[i] for i in range(n))


def _put(model, positions, vals):
    flat, treedef = jax.tree_util.tree_flatten(model)
    flat = list(flat)
    for j, v in zip(positions, vals, strict=True):
        flat[j] = v
    return jax.tree_util.tree_unflatten(treedef, flat)


def dynamics_of(model, method=None, who="fit_parameters"):
    """``(system, method)`` of a model: a system on a Lie group (with ``method``, default
    :class:`~geomjax.LGVI` ``()``, or :class:`~geomjax.NonholonomicVI` ``()`` for the systems
    it integrates, e.g. :class:`~geomjax.learn.GroupLagrangianSystem`), or a *parametric model*, any object with a ``dynamics()``
    method returning ``(system, method)`` built from its leaves (e.g. one mass used by both the
    inertia and gravity, and a thrust map in an :class:`~geomjax.control.trajopt.Actuated`
    method; see :class:`geomjax.learn.problems.QuadrotorModel`)."""
    if getattr(model, "group", None) is None and callable(getattr(model, "dynamics", None)):
        if method is not None:
            raise ValueError(
                f"{who}: argument 'method' must be None for a parametric model (its dynamics() "
                "gives the method)"
            )
        system, method = model.dynamics()
    else:
        system = model
    if getattr(system, "group", None) is None:
        raise ValueError(
            f"{who}: argument 'system' must be a system on a Lie group or a model with "
            f"dynamics() -> (system, method), got {type(model).__name__}"
        )
    if method is None:
        method = LGVI()
        if not method.supports(system):
            method = NonholonomicVI() if NonholonomicVI().supports(system) else method
    return system, method


class _Spec(eqx.Module):
    """The static structure of a fitting problem (part of the compiled program's key)."""

    positions: tuple = eqx.field(static=True)
    kinds: tuple = eqx.field(static=True)
    shapes: tuple = eqx.field(static=True)
    theta_sizes: tuple = eqx.field(static=True)
    layout: tuple = eqx.field(static=True)  # per table (records, segments, dim)
    substeps: int = eqx.field(static=True)


def _unravel(flat, spec):
    """``(theta, deltas, xis)`` of the flat vector of unknowns."""
    out, o = [], 0
    for n in spec.theta_sizes:
        out.append(flat[o : o + n])
        o += n
    deltas, xis = [], []
    for shape in spec.layout:
        n = int(np.prod(shape))
        deltas.append(flat[o : o + n].reshape(shape))
        xis.append(flat[o + n : o + 2 * n].reshape(shape))
        o += 2 * n
    return tuple(out), deltas, xis


def _ravel(y):
    theta, deltas, xis = y
    parts = [t.reshape(-1) for t in theta]
    for d, x in zip(deltas, xis, strict=True):
        parts += [d.reshape(-1), x.reshape(-1)]
    return jnp.concatenate(parts)


def _values(theta, spec):
    return tuple(
        P.from_unconstrained(t, k, s)
        for t, k, s in zip(theta, spec.kinds, spec.shapes, strict=True)
    )


def _build(model, theta, spec):
    vals = _values(theta, spec)
    return _put(model, spec.positions, vals), vals


def _unknowns_and_dynamics(flat, spec, model, method):
    """``(deltas, xis, system, method, B)``: the segments' unknown configuration offsets and
    velocities, and the system and method built from the fitted leaves; ``B`` the actuation
    matrix of an :class:`~geomjax.control.trajopt.Actuated` method (``simulate`` takes body
    forces, so the actuator commands are mapped by the caller, ``B u`` held on each interval as
    the method does) with ``method`` its inner method, else None."""
    theta, deltas, xis = _unravel(flat, spec)
    mod, _ = _build(model, theta, spec)
    sys, meth = dynamics_of(mod, method)
    B = None
    if isinstance(getattr(meth, "matrix", None), jax.Array) and hasattr(meth, "method"):
        B, meth = meth.matrix, meth.method
    return deltas, xis, sys, meth, B


def _residual_parts(flat, weight, spec, model, method, adjoint, tables, noise):
    """Data and continuity residuals (see the module docstring); a pure function of its
    arguments (no closure), so one compiled program serves every fit of the same structure."""
    deltas, xis, sys, meth, B = _unknowns_and_dynamics(flat, spec, model, method)
    G = sys.group
    substeps = spec.substeps
    data_r, cont_r = [], []
    for tab, delta, xi0 in zip(tables, deltas, xis, strict=True):

        def run(g_start, d, x, u, t0, h, L=tab["L"]):
            if B is not None and u is not None:
                u = u @ B.T
            g0 = G.rplus(g_start, d)
            state0 = sys.state_from_velocity(g0, x)
            sol = simulate(
                sys,
                meth,
                state0,
                h / substeps,
                steps=L * substeps,
                controls=u,
                save_every=substeps,
                t0=t0,
                check_inputs=False,
                adjoint=adjoint,
            )
            g, mu = sys.split(sol.states)
            return g, jax.vmap(sys.velocity)(mu)

        seg_run = jax.vmap(run, in_axes=(0, 0, 0, 0, 0, None))  # over segments
        g_pred, xi_pred = jax.vmap(seg_run)(  # over the records of the group
            tab["g"][:, :, 0], delta, xi0, tab["u"], tab["t0"], tab["h"]
        )
        mask = tab["mask"][None, :, :, None]
        r = jax.vmap(jax.vmap(jax.vmap(G.rminus)))(tab["g"], g_pred) / noise
        data_r.append(jnp.where(mask, r, 0.0).reshape(-1))
        if tab["xi"] is not None:
            rv = (xi_pred - tab["xi"]) / tab["vn"][:, None, None, :]
            data_r.append(jnp.where(mask, rv, 0.0).reshape(-1))
        if tab["S"] > 1:
            g_next = jax.vmap(jax.vmap(G.rplus))(tab["g"][:, 1:, 0], delta[:, 1:])
            rc = jax.vmap(jax.vmap(G.rminus))(g_next, g_pred[:, :-1, -1]) / noise
            rx = (xi0[:, 1:] - xi_pred[:, :-1, -1]) * tab["h"][:, None, None] / noise
            cont_r.append(weight * jnp.concatenate([rc, rx], -1).reshape(-1))
    data = jnp.concatenate(data_r)
    cont = jnp.concatenate(cont_r) if cont_r else jnp.zeros((0,), data.dtype)
    return data, cont


def _residual_parts_reset(
    flat, weight, starts, spec, model, method, adjoint, tables, noise, *, states=False
):
    """The residuals of :func:`_residual_parts` with the segment length as *data*: the tables
    are those of segment length 1 (one unknown state per sample interval), and ``starts``
    (per table, ``(N − 1,)`` booleans) marks the intervals that begin a shooting segment.  Each
    record is integrated interval after interval; at a start the state is reset to that
    interval's unknown state (a continuity residual compares the two), elsewhere the motion
    continues.  With ``starts = arange(N − 1) % L == 0`` the residuals are those of segment
    length ``L`` (the unknowns of the other intervals have no effect), so every segment length
    of a schedule is one program.

    ``states=True``: instead, per table, the motion's state at the start of every interval as
    unknowns of that interval, ``(deltas, velocities)`` (``(records, N − 1, dim)`` each): the
    unknowns with which every interval starts where this motion is (:func:`fit_model`'s
    ``restart="motion"``)."""
    deltas, xis, sys, meth, B = _unknowns_and_dynamics(flat, spec, model, method)
    G = sys.group
    substeps = spec.substeps
    data_r, cont_r = [], []
    for tab, delta, xi0, st in zip(tables, deltas, xis, starts, strict=True):
        if tab["L"] != 1:
            raise ValueError("internal: the tables of the reset formulation have segment length 1")

        def record(g_obs, d, x, u, t0, h, st=st):
            def fresh(k):
                return sys.state_from_velocity(G.rplus(g_obs[k, 0], d[k]), x[k])

            def interval(state, k):
                new = fresh(k)
                g_c, mu_c = sys.split(state)
                g_n, _ = sys.split(new)
                rc = G.rminus(g_n, g_c) / noise
                rx = (x[k] - sys.velocity(mu_c)) * h / noise
                state = jax.tree_util.tree_map(lambda a, b: jnp.where(st[k], a, b), new, state)
                g_s, mu_s = sys.split(state)
                uk = None if u is None else u[k]
                if B is not None and uk is not None:
                    uk = uk @ B.T
                sol = simulate(
                    sys,
                    meth,
                    state,
                    h / substeps,
                    steps=substeps,
                    controls=uk,
                    save_every=substeps,
                    t0=t0[k],
                    check_inputs=False,
                    adjoint=adjoint,
                )
                end = jax.tree_util.tree_map(lambda a: a[-1], sol.states)
                return end, (g_s, sys.velocity(mu_s), jnp.concatenate([rc, rx]))

            last, (g_s, xi_s, rcx) = jax.lax.scan(interval, fresh(0), jnp.arange(d.shape[0]))
            g_e, mu_e = sys.split(last)
            g_pred = jnp.concatenate([g_s, g_e[None]])
            xi_pred = jnp.concatenate([xi_s, sys.velocity(mu_e)[None]])
            return g_pred, xi_pred, rcx

        u_all = tab["u"]
        g_pred, xi_pred, rcx = jax.vmap(
            record, in_axes=(0, 0, 0, None if u_all is None else 0, 0, 0)
        )(tab["g"], delta, xi0, u_all, tab["t0"], tab["h"])
        if states:
            d_s = jax.vmap(jax.vmap(G.rminus))(g_pred[:, :-1], tab["g"][:, :, 0])
            data_r.append((d_s, xi_pred[:, :-1]))
            continue
        g_obs = jnp.concatenate([tab["g"][:, :, 0], tab["g"][:, -1:, 1]], axis=1)
        r = jax.vmap(jax.vmap(G.rminus))(g_obs, g_pred) / noise
        data_r.append(r.reshape(-1))
        if tab["xi"] is not None:
            xi_obs = jnp.concatenate([tab["xi"][:, :, 0], tab["xi"][:, -1:, 1]], axis=1)
            data_r.append(((xi_pred - xi_obs) / tab["vn"][:, None, :]).reshape(-1))
        cmask = st.at[0].set(False)[None, :, None]
        cont_r.append(weight * jnp.where(cmask, rcx, 0.0).reshape(-1))
    if states:
        return data_r
    data = jnp.concatenate(data_r)
    cont = jnp.concatenate(cont_r) if cont_r else jnp.zeros((0,), data.dtype)
    return data, cont


def segment_starts(pb, segment_length):
    """Per table of ``pb`` (a :func:`fitting_problem` of segment length 1), the ``(N − 1,)``
    booleans marking the first interval of each segment of ``segment_length`` samples (clipped,
    as :func:`_segments`, to the record)."""
    out = []
    for tab in pb.tables:
        n = tab["g"].shape[1]  # N − 1 intervals
        L = min(int(segment_length), n)
        out.append(jnp.asarray(np.arange(n) % L == 0))
    return tuple(out)


def _residual_vector(flat, weight, spec, model, method, adjoint, tables, noise):
    d, c = _residual_parts(flat, weight, spec, model, method, adjoint, tables, noise)
    return jnp.concatenate([d, c])


def fitting_problem(
    system,
    data,
    where,
    kinds,
    method,
    substeps,
    segment_length,
    noise,
    velocity_noise,
    continuity_weight,
    adjoint,
    who,
):
    """The least-squares problem of :func:`fit_parameters` (the arguments are its, ``who`` the
    function named in errors): a namespace with ``residuals(flat, weight)``, ``flat0`` (the
    initial unknowns: the unconstrained parameters, then the segments' states), ``args`` (the
    arrays and static structure :func:`levenberg_marquardt` takes), ``unravel`` and ``build``."""
    model = system
    system, method_r = dynamics_of(model, method, who)
    G = system.group
    trajs = [data] if isinstance(data, Recording) else list(data)
    if not trajs:
        raise ValueError(f"{who}: argument 'data' must hold at least one Recording")
    trajs = [
        check_recording(t, G, "data" if len(trajs) == 1 else f"data[{i}]", who, any_width=True)
        for i, t in enumerate(trajs)
    ]
    widths = {t.controls.shape[1] for t in trajs if t.controls is not None}
    if len(widths) > 1:
        raise ValueError(
            f"{who}: argument 'data' must give controls of one width in every record, got "
            f"widths {sorted(widths)}"
        )
    # an actuation matrix (Actuated(method, B)) takes commands of width B.shape[1]
    B = getattr(method_r, "matrix", None) if hasattr(method_r, "method") else None
    want = G.dim if B is None else int(np.shape(B)[1])
    m_u = widths.pop() if widths else want
    if m_u != want:
        raise ValueError(
            f"{who}: argument 'data' has controls of width {m_u} but the method takes "
            + (
                f"body forces of width {G.dim}: pass a method that maps them (e.g. "
                "geomjax.control.trajopt.Actuated(LGVI(), B)) or a parametric model"
                if B is None
                else f"actuator commands of width {want} (its matrix is {tuple(np.shape(B))})"
            )
        )
    if not (isinstance(substeps, int) and substeps >= 1):
        raise ValueError(f"{who}: argument 'substeps' must be a positive int, got {substeps!r}")
    if segment_length is not None and not (isinstance(segment_length, int) and segment_length >= 1):
        raise ValueError(
            f"{who}: argument 'segment_length' must be a positive int, got {segment_length!r}"
        )
    leaves, single, names = select_leaves(model, where, who=who)
    if kinds is None:
        kinds = tuple(_auto_kind(x) for x in leaves)
    elif isinstance(kinds, str):
        kinds = (kinds,) * len(leaves)
    kinds = tuple(kinds)
    if len(kinds) != len(leaves) or any(k not in P.KINDS for k in kinds):
        raise ValueError(
            f"{who}: argument 'kinds' must give one of {P.KINDS} per selected leaf "
            f"({len(leaves)}), got {kinds!r}"
        )
    for k, x, n in zip(kinds, leaves, names, strict=True):
        a = np.asarray(x)
        if k == "spd" and _auto_kind(a) != "spd":
            raise ValueError(f"{who}: leaf {n} is declared 'spd' but is not an SPD matrix")
        if k == "positive" and not np.all(a > 0):
            raise ValueError(f"{who}: leaf {n} is declared 'positive' but has entries ≤ 0")
    dtype = jnp.result_type(leaves[0])
    noise = jnp.broadcast_to(jnp.asarray(noise, dtype), (G.dim,))
    shapes = tuple(tuple(np.shape(x)) for x in leaves)

    # --- tables of the records, grouped by length (one vmapped run per group) ---------------
    # (cut in NumPy, the records being data: no eager program of JAX's to compile per slice)
    groups: dict = {}
    for i, tr in enumerate(trajs):
        groups.setdefault((tr.num_samples, tr.xi is None), []).append(i)
    tables, deltas0, xis0, where_traj = [], [], [], {}
    any_u = any(t.controls is not None for t in trajs)
    for (N, no_xi), members in groups.items():
        L = N - 1 if segment_length is None else min(segment_length, N - 1)
        S, idx, mask = _segments(N, L)
        hs, gs, us, xis, t0s, x0s = [], [], [], [], [], []
        for b, i in enumerate(members):
            where_traj[i] = (len(tables), b)
            tr = trajs[i]
            h = float(tr.times[1] - tr.times[0])
            g_obs = np.asarray(tr.g, dtype)
            u = np.zeros((S, L * substeps, m_u))
            if tr.controls is not None:
                j = np.minimum(idx[:, :-1], N - 2)
                u_s = np.where((idx[:, :-1] < N - 1)[..., None], np.asarray(tr.controls)[j], 0.0)
                u = np.repeat(u_s, substeps, axis=1)
            starts = g_obs[idx[:, 0]]
            if tr.xi is not None:
                xi0 = np.asarray(tr.xi, dtype)[idx[:, 0]]
                xis.append(np.asarray(tr.xi, dtype)[idx])
            else:  # finite differences of the measurements
                nxt = g_obs[np.minimum(idx[:, 0] + 1, N - 1)]
                xi0 = jax.vmap(G.rminus)(jnp.asarray(nxt), jnp.asarray(starts)) / h
            hs.append(h)
            gs.append(g_obs[idx])
            us.append(u)
            t0s.append(tr.times[0] + h * L * np.arange(S))
            x0s.append(xi0)
        hs = np.asarray(hs)
        vn = (
            jnp.asarray(np.broadcast_to(np.asarray(velocity_noise, dtype), (len(members), G.dim)))
            if velocity_noise is not None
            else noise[None, :] / jnp.asarray(hs, dtype)[:, None]
        )
        tables.append(
            dict(
                L=L,
                S=S,
                h=jnp.asarray(hs, dtype),
                t0=jnp.asarray(np.stack(t0s), dtype),
                g=jnp.asarray(np.stack(gs)),
                mask=jnp.asarray(mask),
                # no controls in any record: None (a free run; no per-step control array,
                # whose cotangents would make the reversible adjoint's memory O(steps))
                u=jnp.asarray(np.stack(us), dtype) if any_u else None,
                xi=None if no_xi else jnp.asarray(np.stack(xis)),
                vn=vn,
            )
        )
        deltas0.append(jnp.asarray(np.zeros((len(members), S, G.dim), dtype)))
        xis0.append(jnp.asarray(np.stack([np.asarray(x) for x in x0s]), dtype))

    theta0 = tuple(P.to_unconstrained(jnp.asarray(x, dtype), k) for x, k in zip(leaves, kinds))
    spec = _Spec(
        positions=_positions(model, where, len(leaves), single),
        kinds=kinds,
        shapes=shapes,
        theta_sizes=tuple(int(t.size) for t in theta0),
        layout=tuple(tuple(d.shape) for d in deltas0),
        substeps=substeps,
    )
    # theta comes first in the flat vector of unknowns
    flat0 = _ravel((theta0, deltas0, xis0))
    args = (spec, model, method, adjoint, tables, noise)

    def residuals(flat, weight):
        # weight: None (continuity_weight), or a traced weight (the continuation)
        w = continuity_weight if weight is None else weight
        return _residual_vector(flat, w, *args)

    return types.SimpleNamespace(
        residuals=residuals,
        args=args,
        spec=spec,
        model=model,
        flat0=flat0,
        unravel=lambda flat: _unravel(flat, spec),
        build=lambda theta: _build(model, theta, spec),
        tables=tables,
        G=G,
        names=names,
        shapes=shapes,
        kinds=kinds,
        dtype=dtype,
        trajs=trajs,
        where_traj=where_traj,
    )


def fitting_loss(
    system,
    data,
    where,
    *,
    kinds=None,
    method=None,
    substeps: int = 1,
    segment_length: int | None = None,
    noise=1.0,
    velocity_noise=None,
    continuity_weight: float = 1e3,
    adjoint=None,
):
    """The objective of :func:`fit_parameters` as a function: returns ``(loss, y0, unravel)``
    with ``loss(y) = ½ Σ r(y)²`` of the flat vector of unknowns ``y`` (the unconstrained
    parameters first, then the segments' configuration offsets and velocities), ``y0`` the
    initial guess and ``unravel(y) -> (theta, deltas, xis)``.  For custom optimizers (optax) and
    for checking gradients; the arguments are those of :func:`fit_parameters`."""
    pb = fitting_problem(
        system,
        data,
        where,
        kinds,
        method,
        substeps,
        segment_length,
        noise,
        velocity_noise,
        continuity_weight,
        adjoint,
        "fitting_loss",
    )

    def loss(y):
        return 0.5 * jnp.sum(pb.residuals(y, None) ** 2)

    return loss, pb.flat0, pb.unravel


def fit_parameters(
    system,
    data,
    where,
    *,
    kinds=None,
    method=None,
    substeps: int = 1,
    segment_length: int | None = None,
    noise=1.0,
    velocity_noise=None,
    continuity_weight: float = 1e3,
    solver=None,
    max_iters: int = 100,
    rtol: float = 1e-10,
    atol: float = 1e-10,
    adjoint=None,
    rank_tol: float | None = None,
    max_steps: int | None = None,
) -> FitResult:
    """Fit the parameters ``where(system)`` of a system on a Lie group to recorded motions.

    Arguments:
        system: a geomjax system on a Lie group (:class:`~geomjax.RigidBody`,
            :class:`~geomjax.RigidBodySE3`, :class:`~geomjax.EulerPoincareSystem`, a learned
            model of :mod:`geomjax.learn`) holding the initial guess; or a *parametric model*,
            any module with ``dynamics() -> (system, method)`` built from its leaves (one mass
            used by the inertia and by gravity, a thrust map in an
            :class:`~geomjax.control.trajopt.Actuated` method: see
            :class:`geomjax.learn.problems.QuadrotorModel`); ``where`` then selects its leaves
            and ``method`` must be None.
        data: a :class:`Recording` or a sequence of them (lengths may differ); their
            ``controls`` are body forces ``(N − 1, dim)``, or actuator commands ``(N − 1, k)``
            (the same ``k`` in every record) when the method maps them (``Actuated``).
        where: ``system -> leaf`` or a tuple of leaves, as in :func:`equinox.tree_at`, e.g.
            ``lambda s: (s.inertia, s.potential.rho)``.
        kinds: per selected leaf ``"spd"`` (log-Cholesky), ``"positive"`` (log) or ``"free"``;
            default: ``"spd"`` for a symmetric positive definite matrix, ``"free"`` otherwise.
        method: the integrator (default :class:`~geomjax.LGVI` ``()``); a higher order
            :class:`~geomjax.Composition` keeps the discretization bias below the noise.
        substeps: integrator steps per sample interval.
        segment_length: samples per shooting segment (default: the whole record, single
            shooting); shorter segments for long or chaotic records.
        noise: standard deviation of the configuration noise (radians / metres; a scalar or
            ``(dim,)`` per Lie algebra coordinate): the residuals are divided by it.
        velocity_noise: the same for measured velocities (default ``noise`` / sample interval).
        continuity_weight: weight of the continuity residuals of multiple shooting.
        solver: ``None``/``"lm"`` (default): Levenberg–Marquardt with the Jacobian by forward
            mode in one compiled loop, with a continuation in the continuity weight (10, 100,
            then ``continuity_weight``) for multiple shooting; or an optimistix least-squares
            solver or minimiser (``optimistix.LevenbergMarquardt(rtol, atol)``,
            ``optimistix.OptaxMinimiser`` for large models).  (optimistix's own
            Levenberg–Marquardt reached the same estimate on the heavy top in 39 steps against 9,
            and compiled longer.)
        max_iters: solver iterations allowed; a fit that needs more reports it in ``status``
            (``Status.MAX_ITERS``).  (``max_steps`` is a deprecated alias: ``steps`` names time
            steps.)
        adjoint: passed to :func:`~geomjax.simulate` (e.g. :class:`~geomjax.ReversibleAdjoint`
            for reverse-mode solvers on long records).
        rank_tol: the Jacobian is declared rank-deficient when the ratio of its extreme singular
            values (columns scaled to unit norm) falls below this (default ``sqrt(eps)``).

    Returns:
        :class:`FitResult`; ``result.check()`` raises unless the fit converged with full rank.

    The Levenberg–Marquardt loop is compiled once per problem *structure* (the model's
    structure, the fitted leaves' positions, kinds and shapes, the method, the records' lengths
    and grouping, ``substeps``, ``segment_length``, ``rtol``/``atol``): the data, the initial
    guess, the noise levels and ``max_iters`` are traced arguments, and ``where`` is resolved to
    leaf positions, so a new fit of the same structure (other records, another ``where``
    lambda) reuses the compiled program.
    """
    import optimistix as optx

    max_steps = renamed(max_iters, max_steps, "fit_parameters", "max_iters", "max_steps", 100)
    pb = fitting_problem(
        system,
        data,
        where,
        kinds,
        method,
        substeps,
        segment_length,
        noise,
        velocity_noise,
        continuity_weight,
        adjoint,
        "fit_parameters",
    )
    residuals, flat0, unravel, build = pb.residuals, pb.flat0, pb.unravel, pb.build
    tables, G, names, shapes, kinds, dtype = (
        pb.tables,
        pb.G,
        pb.names,
        pb.shapes,
        pb.kinds,
        pb.dtype,
    )
    trajs, where_traj = pb.trajs, pb.where_traj
    if solver is None or solver == "lm":
        # continuation in the continuity weight: the stiff continuity residuals of multiple
        # shooting slow Levenberg–Marquardt down from a poor start; relax them first
        n_seg_cont = sum(t["S"] > 1 for t in tables)
        weights = [w for w in (10.0, 100.0) if n_seg_cont and w < continuity_weight]
        flat, num_steps, capped_at = flat0, 0, None
        for w in [*weights, continuity_weight]:
            # one compiled program for every stage and every fit of the same structure; a
            # stage left without budget still evaluates the residuals and the Jacobian at its
            # weight (the first iteration evaluates the start and takes no step): the cost, the
            # covariance and the rank below are the last stage's, never the loop's zero init
            budget = max_steps - num_steps
            flat, r_all, J, converged, k, why, _ = levenberg_marquardt(
                flat, jnp.asarray(w, dtype), max(budget, 1), rtol, atol, pb.args
            )
            num_steps += min(k, max(budget, 0))
            if num_steps >= max_steps and capped_at is None:
                capped_at = w
        if not converged and why.startswith("max_iters="):
            # the cap is the whole continuation's: name it, and the stage that used it up
            why = f"max_iters={max_steps} reached"
            if capped_at is not None and capped_at != continuity_weight:
                why += f" at continuity weight {capped_at:g} of {continuity_weight:g}"
    else:
        if isinstance(solver, optx.AbstractMinimiser):
            sol = optx.minimise(
                lambda f, a: 0.5 * jnp.sum(residuals(f, a) ** 2),
                solver,
                flat0,
                max_steps=max_steps,
                throw=False,
            )
        else:
            sol = optx.least_squares(residuals, solver, flat0, max_steps=max_steps, throw=False)
        flat = sol.value
        converged = bool(sol.result == optx.RESULTS.successful)
        num_steps = int(sol.stats.get("num_steps", -1))
        why = str(sol.result)
        r_all = residuals(flat, None)
        J = eqx.filter_jit(jax.jacfwd(residuals))(flat, None)

    # --- covariance (Gauss–Newton) and rank ------------------------------------------------
    m = sum(
        int(np.asarray(t["mask"]).sum()) * t["g"].shape[0] * G.dim * (1 if t["xi"] is None else 2)
        for t in tables
    )
    r_all, J = np.asarray(r_all), np.asarray(J)
    n_cont = sum(0 if t["S"] == 1 else t["g"].shape[0] * (t["S"] - 1) * 2 * G.dim for t in tables)
    r_data = r_all[: r_all.size - n_cont]
    p = flat.size - n_cont
    dof = max(m - p, 1)
    s2 = float(np.sum(r_data**2) / dof)
    col = np.linalg.norm(J, axis=0)
    col = np.where(col > 0, col, 1.0)
    Js = J / col
    _, sv, Vt = np.linalg.svd(Js, full_matrices=False)
    # rank: the null space does not depend on the rows' weights, but the heavy continuity rows
    # would make a well-posed multiple-shooting problem look ill-conditioned; judge it with them
    # at unit weight
    Jr = J.copy()
    if n_cont:
        Jr[J.shape[0] - n_cont :] /= continuity_weight
    colr = np.linalg.norm(Jr, axis=0)
    _, svr, Vtr = np.linalg.svd(Jr / np.where(colr > 0, colr, 1.0), full_matrices=False)
    ratio = float(svr[-1] / svr[0]) if svr[0] > 0 else 0.0
    eps = float(np.finfo(np.dtype(dtype)).eps)
    tol = math.sqrt(eps) if rank_tol is None else float(rank_tol)
    n_theta = sum(P.size(k, s) for k, s in zip(kinds, shapes))
    status, message = Status.CONVERGED, "converged"
    if not converged:
        status = Status.MAX_ITERS if np.all(np.isfinite(r_all)) else Status.NONFINITE
        message = (
            f"the solver did not converge ({why}) in {num_steps} of max_iters="
            f"{max_steps} iterations: raise max_iters, improve the initial guess or shorten "
            "segment_length"
        )
    inv_sv = np.where(sv > tol * sv[0], 1.0 / np.maximum(sv, 1e-300) ** 2, 0.0)
    cov_scaled = (Vt.T * inv_sv) @ Vt
    cov_flat = s2 * cov_scaled / np.outer(col, col)
    if ratio < tol:  # the null direction's parameters
        v = Vtr[-1][:n_theta]
        owners = np.concatenate(
            [np.full(P.size(k, s), i) for i, (k, s) in enumerate(zip(kinds, shapes))]
        )
        involved = sorted({names[owners[i]] for i in np.flatnonzero(np.abs(v) > 0.1)})
        what = ", ".join(involved) if involved else "the initial states"
        msg = (
            f"the Jacobian is rank-deficient (singular value ratio {ratio:.2e} < {tol:.1e}): the "
            f"data do not determine {what} separately (e.g. inertia and potential scale together "
            "when no input is known); fix one of them or record motions under known inputs"
        )
        warn(f"fit_parameters: {msg}")
        message = msg if status == Status.CONVERGED else f"{message}; {msg}"
        status = Status.RANK_DEFICIENT if status == Status.CONVERGED else status
    # delta method: covariance of the physical leaves
    theta = unravel(flat)[0]
    n_t = sum(pb.spec.theta_sizes)
    T = np.asarray(_phys_jacobian(flat[:n_t], pb.spec))
    cov = T @ cov_flat[:n_theta, :n_theta] @ T.T
    sys_fit, vals = build(theta)
    dyn_fit = dynamics_of(sys_fit, method)[0]
    std_flat = np.sqrt(np.maximum(np.diag(cov), 0.0))
    stds, o = [], 0
    for s in shapes:
        k = int(np.prod(s, dtype=int))
        stds.append(std_flat[o : o + k].reshape(s))
        o += k
    y = unravel(flat)
    init_states = []
    for i in range(len(trajs)):
        gi, b = where_traj[i]
        t = tables[gi]
        g0 = G.rplus(t["g"][b, 0, 0], y[1][gi][b, 0])
        init_states.append(dyn_fit.state_from_velocity(g0, y[2][gi][b, 0]))
    return FitResult(
        system=sys_fit,
        values=tuple(vals),
        std=tuple(stds),
        covariance=cov,
        names=names,
        initial_states=init_states,
        sigma=math.sqrt(s2),
        cost=float(0.5 * np.sum(r_all**2)),
        converged=converged,
        rank_ratio=ratio,
        status=status,
        message=message,
        iterations=num_steps,
    )


#: how many times each compiled program of this module was traced (a trace precedes every
#: compilation): repeated fits of one structure must not add to it
TRACES: collections.Counter = collections.Counter()


@eqx.filter_jit
def _phys_jacobian(theta_flat, spec):
    """Jacobian of the physical leaves (flattened, concatenated) in the unconstrained ones."""
    TRACES["parameterization"] += 1

    def phys(tf):
        theta, o = [], 0
        for n in spec.theta_sizes:
            theta.append(tf[o : o + n])
            o += n
        return jnp.concatenate([v.reshape(-1) for v in _values(tuple(theta), spec)])

    return jax.jacfwd(phys)(theta_flat)


def _lm_stop_reason(done: bool, lam: float, max_steps) -> str:
    """Why a Levenberg–Marquardt solve stopped, in words."""
    if done:
        return "converged"
    if lam >= 1e16:
        return "the damping grew without bound (no step lowers the cost)"
    return f"max_iters={max_steps} reached"


def _lm_residuals(weight, starts, spec, model, method, adjoint, tables, noise):
    """The residual vector ``x ↦ r`` a Levenberg–Marquardt program minimizes: the fitting
    problem's, or with ``starts`` those of :func:`_residual_parts_reset`."""

    def fn(x):
        if starts is not None:
            d, c = _residual_parts_reset(
                x, weight, starts, spec, model, method, adjoint, tables, noise
            )
            return jnp.concatenate([d, c])
        return _residual_vector(x, weight, spec, model, method, adjoint, tables, noise)

    return fn


def _lm_columns(x0, cols):
    """``(n_act, embed, active)`` for the unknowns solved for: all, or the columns ``cols`` of
    ``x`` (an index past the end pads): their number, ``embed(x, z)`` adding a step ``z`` in
    them to ``x``, and ``active(x)`` reading them."""
    n_act = x0.size if cols is None else cols.shape[0]

    def embed(x, z):
        return x + z if cols is None else x.at[cols].add(z, mode="drop")

    def active(x):
        return x if cols is None else x.at[cols].get(mode="fill", fill_value=0.0)

    return n_act, embed, active


def levenberg_marquardt(
    x0,
    weight,
    max_steps,
    rtol,
    atol,
    args,
    history=0,
    svd=False,
    starts=None,
    cols=None,
):
    """Levenberg–Marquardt (:func:`_lm_run_program`) on the residuals of a fitting problem
    (``args`` of :func:`fitting_problem`): ``(x, r, J, converged, steps, reason, costs)``, with
    ``costs`` the cost ``½ Σ r²`` of the accepted point after each of the first ``history``
    iterations (NumPy; the first is the initial guess's); ``svd``: see :func:`_lm_run_program`;
    ``starts``: the segments' first intervals (:func:`segment_starts`) of a problem of segment
    length 1 (the residuals of :func:`_residual_parts_reset`)."""
    x, r, J, done, k, lam, hist = _lm_run(
        x0,
        weight,
        jnp.asarray(max_steps),
        rtol,
        atol,
        *args,
        history=int(history),
        svd=bool(svd),
        starts=starts,
        cols=cols,
    )
    done, k, lam = bool(done), int(k), float(lam)
    why = _lm_stop_reason(done, lam, max_steps)
    return x, r, J, done, k, why, np.asarray(hist)[: min(k, int(history))]


def _lm_run_program(
    x0,
    weight,
    max_steps,
    rtol,
    atol,
    spec,
    model,
    method,
    adjoint,
    tables,
    noise,
    history=0,
    svd=False,
    starts=None,
    cols=None,
):
    """Levenberg–Marquardt with Marquardt's diagonal scaling (Nocedal & Wright, *Numerical
    Optimization*, 2nd ed., Springer 2006, §10.3), the Jacobian by forward mode (``jax.jacfwd``:
    the unknowns are few, the residuals many), in one compiled ``lax.while_loop``.

    Converged when the Gauss–Newton decrement ``½ gᵀ(JᵀJ)⁻¹g`` (the decrease a full Gauss–Newton
    step would still bring) is at most ``rtol·cost + atol``, or an accepted step changes the cost
    by at most ``rtol·cost + atol`` and moves the unknowns by at most
    ``sqrt(rtol)·(|x| + sqrt(rtol))``, or the gradient vanishes (``max |g| ≤ atol``).

    A module-level function of the problem's arrays and static structure (``spec``, the model's
    and the method's structure, the tables' sizes): the data, the initial guess, the continuity
    weight, ``max_steps`` and the model's values are traced, so a new fit of the same structure
    reuses the compiled program.  ``history`` (static): the length of the record of the accepted
    cost after each iteration that is returned last.  ``svd`` (static): the step and the
    decrement from the SVD of the Jacobian instead of the normal equations (for
    rank-deficient problems, e.g. networks, whose ``JᵀJ`` is singular in floating point), and
    Levenberg's damping ``λ σ₁² 1`` (``σ₁`` the largest singular value of ``J``) instead of
    Marquardt's ``λ diag(JᵀJ)``.  A network's Jacobian has columns near zero where the
    linearization holds only for small changes (the first layers' weights, which act through
    the small last layer: their columns are the last layer's weights times the rest); Marquardt's
    scaling gives those directions as little damping as their columns are small, so the step
    moves them by orders of magnitude more than the linear model allows (measured on the
    pendulum of the learning guide: weight steps of 10³ from every damping up to 10³, each
    rejected, until the damping blew up), while damping in the unknowns' own units bounds every
    direction's step alike (the figures: the learning guide, "Training to convergence").
    ``starts`` (traced; see :func:`levenberg_marquardt`): the
    residuals of :func:`_residual_parts_reset`.  ``cols`` (traced, optional): the indices of
    the unknowns solved for (the others held; an index past the end is a padding column, zero
    in the Jacobian), so that the Jacobian has no columns for the unknowns a stage's residuals do
    not depend on, and stages of different sizes share one program.
    """
    TRACES["levenberg_marquardt"] += 1

    fn = _lm_residuals(weight, starts, spec, model, method, adjoint, tables, noise)

    n_act, embed, active = _lm_columns(x0, cols)

    def both(z, x):
        r = fn(embed(x, z))
        return r, r

    jac_z = jax.jacfwd(both, has_aux=True)  # one copy of the model in the program

    def jac_and_value(x):
        return jac_z(jnp.zeros((n_act,), x.dtype), x)

    dtype = x0.dtype
    r_shape = jax.eval_shape(fn, x0).shape
    inf = jnp.asarray(jnp.inf, dtype)
    init = (
        x0,  # accepted point
        jnp.zeros(r_shape, dtype),
        jnp.zeros((*r_shape, n_act), dtype),
        inf,  # its cost (none accepted yet)
        x0,  # trial point
        jnp.asarray(1e-3, dtype),
        jnp.asarray(0),
        jnp.asarray(False),
        jnp.full((max(int(history), 1),), jnp.nan, dtype),
    )

    def cond(c):
        *_, lam, k, done, _ = c
        return (~done) & (k < max_steps) & (lam < 1e16)

    def body(c):
        x, r, J, cost, xt, lam, k, _, hist = c
        Jt, rt = jac_and_value(xt)
        cost_t = 0.5 * jnp.sum(rt**2)
        ok = jnp.isfinite(cost_t) & (cost_t <= cost)
        first = ~jnp.isfinite(cost)
        small = (
            ok
            & ~first
            & (cost - cost_t <= rtol * cost_t + atol)
            & (
                jnp.linalg.norm(active(xt - x))
                <= jnp.sqrt(rtol) * (jnp.linalg.norm(active(x)) + jnp.sqrt(rtol))
            )
        )
        x = jnp.where(ok, xt, x)
        r = jnp.where(ok, rt, r)
        J = jnp.where(ok, Jt, J)
        cost = jnp.where(ok, cost_t, cost)
        lam = jnp.where(first, lam, jnp.where(ok, lam / 3.0, lam * 2.0))
        g = J.T @ r
        if svd:
            # through the SVD of J (not the normal equations, whose condition is J's squared):
            # the damped step and the decrement over J's numerical range (a zero column, e.g. a
            # potential's constant offset, which no motion sees, takes no step); Levenberg's
            # damping, relative to the largest curvature (see the docstring)
            U, sv, Vt = jnp.linalg.svd(J, full_matrices=False)
            ur = U.T @ r
            mu = lam * jnp.maximum(sv[0] ** 2, jnp.finfo(dtype).tiny)
            dx = -(Vt.T @ (sv * ur / (sv**2 + mu)))
            live = sv > jnp.finfo(dtype).eps * max(J.shape) * sv[0]
            dec = 0.5 * jnp.sum(jnp.where(live, ur, 0.0) ** 2)
        else:
            JtJ = J.T @ J
            D = jnp.maximum(jnp.diag(JtJ), jnp.finfo(dtype).tiny)
            dx = -jnp.linalg.solve(JtJ + lam * jnp.diag(D), g)
            # the Gauss–Newton decrement: what a full Gauss–Newton step would still gain
            dec = 0.5 * g @ jnp.linalg.solve(JtJ + 1e-12 * jnp.diag(D), g)
        converged_here = ~first & (dec <= rtol * cost + atol)
        done = small | converged_here | (jnp.max(jnp.abs(g)) <= atol)
        hist = hist.at[k].set(cost, mode="drop")
        return (x, r, J, cost, embed(x, dx), lam, k + 1, done, hist)

    x, r, J, _, _, lam, k, done, hist = jax.lax.while_loop(cond, body, init)
    return x, r, J, done, k, lam, hist


# an eager call compiles with XLA:CPU's small-loop threshold raised for this program alone.
# Not with the legacy elemental emitters (as _lm_cg_run below): on the learning guide's pendulum
# (solver="lm") they took 36-39 % off the compilation's CPU time (8.9-9.2 -> 5.4-5.9 s,
# alternated fresh processes on a loaded 2-core x86-64 CPU, float64), but its iterations ran
# longer in the same process (median of three runs of 10 iterations: 18.9 s of CPU against
# 13.7 s; load average 7), more than the compilation saved over the pendulum's 50 iterations
_lm_run = top_level_options(_lm_run_program, small_loops=True)


def normal_cg(jvp, vjp, b, mu, max_steps, tol=1e-3):
    """``(δ, iterations)``: ``(JᵀJ + μ I) δ = b`` by conjugate gradients from ``δ = 0``, ``J``
    given by its products ``jvp(v) = J v`` and ``vjp(u) = Jᵀ u`` only; stops when the residual
    is at most ``tol |b|`` or after ``max_steps`` iterations (traced or static)."""
    dtype = b.dtype
    tiny = jnp.finfo(dtype).tiny
    tol2 = (tol * jnp.linalg.norm(b)) ** 2

    def cond(c):
        _, _, _, rr, i = c
        return (i < max_steps) & (rr > tol2)

    def body(c):
        d, res, p, rr, i = c
        Ap = vjp(jvp(p)) + mu * p
        alpha = rr / jnp.maximum(p @ Ap, tiny)
        d = d + alpha * p
        res = res - alpha * Ap
        rr_new = res @ res
        p = res + (rr_new / jnp.maximum(rr, tiny)) * p
        return d, res, p, rr_new, i + 1

    d, _, _, _, i = jax.lax.while_loop(cond, body, (jnp.zeros_like(b), b, b, b @ b, jnp.asarray(0)))
    return d, i


#: power iterations on ``JᵀJ`` for the damping's scale of :func:`_lm_cg_run_program`
POWER_STEPS = 20


def _gradient_scale_step(jvp, vjp, r, lam, scale, first, max_steps, tol=1e-3):
    """``(g, σ₁², δ, iterations)`` of one iteration of :func:`_lm_cg_run_program` in one loop
    whose every pass applies the linearization's products once: the gradient ``g = Jᵀr``
    (the first pass), then where ``first`` the largest eigenvalue ``σ₁²`` of ``JᵀJ`` by
    :data:`POWER_STEPS` power iterations from a fixed random vector and a last product for
    its Rayleigh quotient (otherwise ``scale`` is kept), then the step
    ``(JᵀJ + λ σ₁² I) δ = −g`` by :func:`normal_cg`'s iteration (the same operations, to
    ``max_steps`` iterations or a residual of ``tol |g|``).  As three loops (the gradient, the
    power iteration and :func:`normal_cg`) the program held four copies of the transposed
    products and three of the forward ones: on the learning guide's far-predicting potential
    15 391 jaxpr equations against 7 937, and 1.4–1.5× the compile time."""
    dtype = r.dtype
    tiny = jnp.finfo(dtype).tiny
    n = jax.eval_shape(vjp, r).shape[0]
    v0 = jax.random.normal(jax.random.PRNGKey(1), (n,), dtype)
    v0 = v0 / jnp.linalg.norm(v0)
    n_power = jnp.where(first, POWER_STEPS + 1, 0)
    zero = jnp.zeros((n,), dtype)

    def cond(c):
        j, _, _, _, _, _, _, rr, tol2, i = c
        solving = (i < max_steps) & (rr > tol2)
        return (j <= n_power) | solving

    def body(c):
        j, g, v, scale, d, res, p, rr, tol2, i = c
        gradient = j == 0
        power = (j >= 1) & (j <= n_power)
        q = jnp.where(power, v, p)
        w = vjp(jax.lax.cond(gradient, lambda: r, lambda: jvp(q)))
        # the gradient; the conjugate gradients start from δ = 0, b = −g
        g = jnp.where(gradient, w, g)
        b = -w
        # power iteration (the last pass: the Rayleigh quotient of the 20th iterate)
        v_next = w / jnp.maximum(jnp.linalg.norm(w), tiny)
        scale = jnp.where(power & (j == n_power), jnp.maximum(v @ w, tiny), scale)
        v = jnp.where(power, v_next, v)
        # a conjugate-gradient iteration (normal_cg's)
        mu = lam * scale
        Ap = w + mu * p
        alpha = rr / jnp.maximum(p @ Ap, tiny)
        res_n = res - alpha * Ap
        rr_n = res_n @ res_n
        solve = ~gradient & ~power
        d = jnp.where(solve, d + alpha * p, d)
        p = jnp.where(solve, res_n + (rr_n / jnp.maximum(rr, tiny)) * p, jnp.where(gradient, b, p))
        res = jnp.where(solve, res_n, jnp.where(gradient, b, res))
        rr = jnp.where(solve, rr_n, jnp.where(gradient, b @ b, rr))
        tol2 = jnp.where(gradient, (tol * jnp.linalg.norm(b)) ** 2, tol2)
        return j + 1, g, v, scale, d, res, p, rr, tol2, i + solve.astype(i.dtype)

    init = (
        jnp.asarray(0),
        zero,
        v0,
        scale,
        zero,
        zero,
        zero,
        jnp.asarray(1.0, dtype),
        jnp.asarray(0.0, dtype),
        jnp.asarray(0),
    )
    _, g, _, scale, d, _, _, _, _, i = jax.lax.while_loop(cond, body, init)
    return g, scale, d, i


def levenberg_marquardt_cg(
    x0, weight, max_steps, rtol, atol, args, cg_steps=50, history=0, starts=None, cols=None
):
    """Levenberg–Marquardt with its step by conjugate gradients (:func:`_lm_cg_run_program`):
    ``(x, converged, steps, reason, costs, cg)``, ``costs`` as :func:`levenberg_marquardt`'s,
    ``cg`` the conjugate-gradient iterations of all its steps together."""
    x, done, k, lam, hist, cg = _lm_cg_run(
        x0,
        weight,
        jnp.asarray(max_steps),
        rtol,
        atol,
        *args,
        cg_steps=int(cg_steps),
        history=int(history),
        starts=starts,
        cols=cols,
    )
    done, k, lam = bool(done), int(k), float(lam)
    why = _lm_stop_reason(done, lam, max_steps)
    return x, done, k, why, np.asarray(hist)[: min(k, int(history))], int(cg)


def _lm_cg_run_program(
    x0,
    weight,
    max_steps,
    rtol,
    atol,
    spec,
    model,
    method,
    adjoint,
    tables,
    noise,
    cg_steps=50,
    history=0,
    starts=None,
    cols=None,
):
    """Levenberg–Marquardt whose step ``(JᵀJ + μ I) δ = −Jᵀr`` is solved matrix-free by
    conjugate gradients (Hestenes & Stiefel, *Methods of conjugate gradients for solving linear
    systems*, J. Res. NBS 1952; as the inner solve of an inexact Gauss–Newton method, Nocedal &
    Wright, *Numerical Optimization*, 2nd ed., §7.1 and §10.3): each product with ``JᵀJ`` is one
    forward-mode product of the residuals' linearization (``jax.linearize``, formed once per
    accepted point) and one transposed product, so the Jacobian is never formed — the cost of an
    iteration is that of at most ``cg_steps`` (static) gradient evaluations, whatever the
    number of unknowns.

    Damping: Levenberg's, ``μ = λ σ₁²`` in the unknowns' own units (``σ₁²`` the largest
    eigenvalue of ``JᵀJ`` at the start, by power iteration; see :func:`_lm_run_program` for why
    not Marquardt's scaling), ``λ`` updated from the gain ratio ``ρ`` of the actual to the
    predicted decrease: ``λ ← λ max(1/3, 1 − (2ρ − 1)³)`` after an accepted step, ``λ ← λ ν``
    with ``ν`` doubling over consecutive rejections (Nielsen's rule: Madsen, Nielsen & Tingleff,
    *Methods for non-linear least squares problems*, 2nd ed., DTU 2004, §3.2).  The conjugate
    gradients stop when the residual of the damped system falls to ``10⁻³ |Jᵀr|`` or after
    ``cg_steps`` iterations (a truncated step is still a descent direction).  Converged when the
    decrease the damped Gauss–Newton model predicts for the step is at most ``rtol·cost + atol``
    at damping ``λ ≤ 10⁻³`` (the damped decrease, ``½ Σ gᵢ² (aᵢ + 2μ) / (aᵢ + μ)²`` over the
    eigenvalues ``aᵢ`` of ``JᵀJ``, is a lower bound of the Gauss–Newton decrement ``½ Σ gᵢ² / aᵢ``
    that the small damping keeps close), or an accepted step changes the cost by at most
    ``rtol·cost + atol`` and the unknowns by a relative ``sqrt(rtol)``, or the gradient vanishes
    (``max |Jᵀr| ≤ atol``).  ``starts``, ``cols``, ``history``: as :func:`_lm_run_program`.
    Returns ``(x, converged, iterations, λ, costs, cg iterations)``."""
    TRACES["levenberg_marquardt_cg"] += 1

    fn = _lm_residuals(weight, starts, spec, model, method, adjoint, tables, noise)

    n_act, embed, active = _lm_columns(x0, cols)
    dtype = x0.dtype

    def linear(x):
        """``(r, J·, Jᵀ·)`` at ``x`` (in the active unknowns)."""
        z0 = jnp.zeros((n_act,), dtype)
        r, jvp = jax.linearize(lambda z: fn(embed(x, z)), z0)
        vjp = jax.linear_transpose(jvp, z0)
        return r, jvp, lambda u: vjp(u)[0]

    inf = jnp.asarray(jnp.inf, dtype)
    init = (
        x0,  # accepted point
        inf,  # its cost (none accepted yet)
        x0,  # trial point
        jnp.asarray(1e-3, dtype),
        jnp.asarray(0),
        jnp.asarray(False),
        jnp.full((max(int(history), 1),), jnp.nan, dtype),
        jnp.asarray(0),
        jnp.asarray(1.0, dtype),  # σ₁², set at the first iteration
        jnp.asarray(1.0, dtype),  # the decrease the model predicted for the trial step
        jnp.asarray(2.0, dtype),  # the factor of the next rejection
    )

    def cond(c):
        lam, k, done = c[3], c[4], c[5]
        return (~done) & (k < max_steps) & (lam < 1e16)

    def body(c):
        x, cost, xt, lam, k, _, hist, n_cg, scale, pred_t, nu = c
        rt = fn(xt)
        cost_t = 0.5 * jnp.sum(rt**2)
        ok = jnp.isfinite(cost_t) & (cost_t <= cost)
        first = ~jnp.isfinite(cost)
        small = (
            ok
            & ~first
            & (cost - cost_t <= rtol * cost_t + atol)
            & (
                jnp.linalg.norm(active(xt - x))
                <= jnp.sqrt(rtol) * (jnp.linalg.norm(active(x)) + jnp.sqrt(rtol))
            )
        )
        # Nielsen's update of the damping from the gain ratio ρ (actual / predicted decrease)
        rho = (cost - cost_t) / jnp.maximum(pred_t, jnp.finfo(dtype).tiny)
        shrink = jnp.maximum(1.0 / 3.0, 1.0 - (2.0 * jnp.clip(rho, 0.0, 1.0) - 1.0) ** 3)
        lam = jnp.where(first, lam, jnp.where(ok, lam * shrink, lam * nu))
        nu = jnp.where(ok, 2.0, 2.0 * nu)
        x = jnp.where(ok, xt, x)
        cost = jnp.where(ok, cost_t, cost)
        r, jvp, vjp = linear(x)
        # the gradient, the scale (once, at the start) and the step in one loop: one copy of
        # the linearization's products in the program
        g, scale, dx, i = _gradient_scale_step(jvp, vjp, r, lam, scale, first, cg_steps)
        mu = lam * scale
        # the damped model's predicted decrease, −gᵀδ − ½|Jδ|², with JᵀJδ ≈ −g − μδ
        pred = -0.5 * (g @ dx) + 0.5 * mu * (dx @ dx)
        converged_here = ~first & (lam <= 1e-3) & (pred <= rtol * cost + atol)
        done = small | converged_here | (jnp.max(jnp.abs(g)) <= atol)
        hist = hist.at[k].set(cost, mode="drop")
        return (x, cost, embed(x, dx), lam, k + 1, done, hist, n_cg + i, scale, pred, nu)

    x, _, _, lam, k, done, hist, n_cg, *_ = jax.lax.while_loop(cond, body, init)
    return x, done, k, lam, hist, n_cg


# compiled with the small-loop threshold and XLA:CPU's legacy elemental emitters (as fit_model's
# Adam step): the far-predicting potential's program (the learning guide's recipe) compiles in
# 30-37 % less CPU time (19.8-21.1 -> 13.2-13.8 s, alternated fresh processes on a loaded 2-core
# x86-64 CPU, float64), its iterations as fast (median of three runs of 4 iterations each way in
# one process: 5.6 s of CPU against 6.0 s), the same iteration counts and statuses
_lm_cg_run = top_level_options(_lm_cg_run_program, LEGACY_EMITTERS, small_loops=True)
