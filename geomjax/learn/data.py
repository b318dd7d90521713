"""Recorded motions to fit: :class:`Recording` and its input checks."""

from __future__ import annotations

import equinox as eqx
import jax
import numpy as np

from .._internal.warn import renamed, renamed_attribute
from ..lie.base import LieGroup

__all__ = ["Recording"]


class Recording(eqx.Module):
    """One recorded motion on a Lie group, sampled at uniformly spaced times.

    Arguments:
        times: ``(N,)`` sample times, strictly increasing and uniformly spaced (spread of the
            intervals ≤ 1e-6 of their mean, or the rounding of the times in their precision), ``N ≥ 2``.
        g: ``(N, *group.element_shape)`` measured configurations (orientations ``(N, 3, 3)``,
            poses ``(N, 4, 4)``), each within the group's tolerance of the group.
        xi: optional ``(N, dim)`` measured body velocities ``g⁻¹ġ`` (angular velocity on SO(3),
            ``(ω, v)`` on SE(3)).  Without them the initial velocities are estimated.
        controls: optional ``(N − 1, dim)`` known body inputs (torques, wrenches) held constant
            on each sample interval ``[t_k, t_{k+1}]`` (zero-order hold, as in
            :func:`geomjax.simulate`), or ``(N − 1, k)`` actuator commands (rotor thrusts) that
            the fitted model's method maps to body forces.

    ``times`` and ``controls`` are the names of :class:`geomjax.Solution`'s and
    :class:`~geomjax.control.trajopt.OCPSolution`'s fields (``ts`` is a deprecated alias).
    This class was ``geomjax.learn.Trajectory`` (a deprecated alias that warns): a record of
    observed states, not :class:`geomjax.control.Trajectory` (a curve traversed in time).
    """

    times: jax.Array
    g: jax.Array
    xi: jax.Array | None = None
    controls: jax.Array | None = None

    def __init__(self, times=None, g=None, xi=None, controls=None, *, ts=None):
        self.times = renamed(times, ts, "Recording", "times", "ts")
        self.g, self.xi, self.controls = g, xi, controls

    ts = renamed_attribute("Recording", "ts", "times")

    @property
    def num_samples(self) -> int:
        return int(np.shape(self.times)[0])


def _float(x, name, where):
    a = np.asarray(x)
    if not np.issubdtype(a.dtype, np.floating):
        if np.issubdtype(a.dtype, np.integer):
            a = a.astype(float)
        else:
            raise ValueError(f"{where}: argument '{name}' must be a float array, got {a.dtype}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{where}: argument '{name}' must be finite (found NaN or inf)")
    return a


def check_recording(
    traj, group: LieGroup, name: str, where: str, any_width: bool = False
) -> Recording:
    """Validate one :class:`Recording` against ``group`` (eager, NumPy): ``ValueError`` naming
    the argument for unordered or non-uniform times, disagreeing shapes, NaN, or configurations
    far from the group.  ``any_width``: controls may have any width ``k`` (actuator commands
    mapped to body forces by the method), else ``group.dim``."""
    if not isinstance(traj, Recording):
        raise ValueError(
            f"{where}: argument '{name}' must be a geomjax.learn.Recording, got {type(traj).__name__}"
        )
    ts = _float(traj.times, f"{name}.times", where)
    if ts.ndim != 1 or ts.shape[0] < 2:
        raise ValueError(
            f"{where}: argument '{name}.times' must be 1-d with ≥ 2 times, got {ts.shape}"
        )
    d = np.diff(ts)
    if not np.all(d > 0):
        k = int(np.argmax(~(d > 0)))
        raise ValueError(
            f"{where}: argument '{name}.times' must be strictly increasing (times[{k + 1}] = {ts[k + 1]} "
            f"≤ times[{k}] = {ts[k]})"
        )
    # relative 1e-6, or the rounding of the times in their own precision (float32 records)
    tol = 1e-6 * d.mean() + 64 * np.finfo(ts.dtype).eps * np.max(np.abs(ts))
    if np.max(np.abs(d - d.mean())) > tol:
        raise ValueError(
            f"{where}: argument '{name}.times' must be uniformly spaced (intervals from {d.min():.6g} "
            f"to {d.max():.6g}); resample the record"
        )
    N = ts.shape[0]
    g = _float(traj.g, f"{name}.g", where)
    want = (N, *group.element_shape)
    if g.shape != want:
        raise ValueError(
            f"{where}: argument '{name}.g' must have shape {want} (one element of {group.name} per "
            f"time in '{name}.times'), got {g.shape}"
        )
    defect = np.asarray(group.defect(g))
    tol = max(1e-6, 1e3 * float(np.finfo(g.dtype).eps))
    if not np.all(defect <= tol):
        k = int(np.argmax(defect))
        raise ValueError(
            f"{where}: argument '{name}.g' is far from {group.name}: sample {k} has defect "
            f"{defect[k]:.3g} > {tol:.1e} (project the measurements onto the group first)"
        )
    xi = None
    if traj.xi is not None:
        xi = _float(traj.xi, f"{name}.xi", where)
        if xi.shape != (N, group.dim):
            raise ValueError(
                f"{where}: argument '{name}.xi' must have shape {(N, group.dim)}, got {xi.shape}"
            )
    u = None
    if traj.controls is not None:
        u = _float(traj.controls, f"{name}.controls", where)
        ok = u.ndim == 2 and u.shape[0] == N - 1 and (any_width or u.shape[1] == group.dim)
        if not ok:
            raise ValueError(
                f"{where}: argument '{name}.controls' must have shape "
                f"{(N - 1, 'k' if any_width else group.dim)} (one input per sample interval), "
                f"got {u.shape}"
            )
    return Recording(ts, g, xi, u)
