"""A batch of simulations split over devices: :func:`simulate_sharded`; any batched computation
(trajectory optimizations, MPC runs, fits) split the same way: :func:`shard_vmap`.

The batch of initial states (and, optionally, of system parameters and open-loop controls) is
split along its leading axis over a one-dimensional :class:`jax.sharding.Mesh` with
:func:`jax.shard_map`; every device runs the same program, ``jax.vmap`` of :func:`simulate` (one
``lax.scan``) over its shard, and the result is one :class:`Solution` whose arrays are sharded
along the batch axis.  Nothing here is specific to one host: with ``jax.distributed.initialize()``
the mesh spans the devices of every process (see the README, "Scale").
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .base import AbstractMethod
from .simulate import Solution, simulate

__all__ = ["batch_mesh", "shard_batch", "shard_vmap", "simulate_sharded"]


def batch_mesh(devices=None, axis_name: str = "batch") -> Mesh:
    """A one-dimensional mesh over ``devices`` (default: every device of every process)."""
    devices = jax.devices() if devices is None else list(devices)
    if not devices:
        raise ValueError("batch_mesh: argument 'devices' must name at least one device")
    return Mesh(np.asarray(devices), (axis_name,))


def _expand_axes(axes, tree, name):
    """``axes`` (None, 0 or a pytree prefix of ``tree`` with 0/None leaves) → one entry per leaf."""
    if axes is None or isinstance(axes, int | np.integer):
        if axes not in (None, 0):
            raise ValueError(f"simulate_sharded: argument '{name}' must be None or 0, got {axes!r}")
        return jax.tree_util.tree_map(lambda _: axes, tree)

    def check(a, sub):
        if a not in (None, 0):
            raise ValueError(
                f"simulate_sharded: the leaves of argument '{name}' must be None or 0, got {a!r}"
            )
        return jax.tree_util.tree_map(lambda _: a, sub)

    try:
        return jax.tree_util.tree_map(check, axes, tree, is_leaf=lambda x: x is None)
    except ValueError as e:
        if "simulate_sharded" in str(e):
            raise
        raise ValueError(
            f"simulate_sharded: argument '{name}' must be None, 0 or a pytree prefix of the "
            f"corresponding argument with 0/None leaves ({e})"
        ) from None


def _batch_size(tree, axes, name, where="simulate_sharded"):
    # tree first: its array leaves meet their axis (0 or None) in ``axes``
    flags = jax.tree_util.tree_map(lambda x, a: a == 0, tree, axes)
    leaves = jax.tree_util.tree_leaves(tree)
    batched = [x for x, b in zip(leaves, jax.tree_util.tree_leaves(flags), strict=True) if b]
    if any(jnp.ndim(x) == 0 for x in batched):
        raise ValueError(f"{where}: a batched leaf of '{name}' has no leading axis")
    return {jnp.shape(x)[0] for x in batched}


def _padding(B, n_dev, pad, what):
    """How many members pad a batch of ``B`` to a multiple of ``n_dev`` (an error unless ``pad``)."""
    extra = -B % n_dev
    if extra and not pad:
        raise ValueError(
            f"{what} ({B}) must be a multiple of the number of devices in 'mesh' ({n_dev}); "
            "pass pad=True to pad it"
        )
    return extra


def _pad(tree, axes, pad):
    """Repeat the last batch member ``pad`` times (valid states: no spurious input errors)."""

    def f(x, a):
        if a != 0 or pad == 0:
            return x
        return jnp.concatenate([x, jnp.repeat(x[-1:], pad, axis=0)], axis=0)

    return jax.tree_util.tree_map(f, tree, axes)


def simulate_sharded(
    system,
    method: AbstractMethod,
    states0,
    dt,
    steps: int,
    controls=None,
    *,
    mesh: Mesh | None = None,
    system_axes=None,
    controls_axes=None,
    pad: bool = False,
    **kwargs,
) -> Solution:
    """``jax.vmap(simulate)`` over a batch, the batch split over the devices of ``mesh``.

    Arguments:
        system, method, dt, steps: as in :func:`simulate` (``dt`` shared by the batch).
        states0: a batch of initial states: every leaf has a leading axis of size ``B``.
        controls: as in :func:`simulate` (leaves ``(steps, ...)``), or batched ``(B, steps, ...)``
            with ``controls_axes=0``; a feedback ``u(t, state)`` is shared by the batch.
        mesh: a one-dimensional :class:`jax.sharding.Mesh` (default :func:`batch_mesh`: all
            devices).  Its axis splits the batch.
        system_axes: ``None`` (one system for the whole batch, replicated), ``0`` (every array
            leaf of ``system`` has a leading batch axis) or a pytree prefix of ``system`` with
            0/None leaves, as ``in_axes`` of ``jax.vmap`` (e.g. a batch of inertia tensors).
        controls_axes: ``None`` (shared controls) or ``0`` (batched), as ``system_axes``.
        pad: if ``B`` is not a multiple of the number of devices, repeat the last batch member up
            to the next multiple and drop the extra results (otherwise a ``ValueError``).
        **kwargs: passed to :func:`simulate` (``save_every``, ``t0``, ``checkpoint``,
            ``check_inputs``).

    Returns:
        :class:`Solution` with a leading batch axis on every array (``times`` ``(B, n_save + 1)``,
        states ``(B, n_save + 1, ...)``), sharded over ``mesh``: the values of
        ``jax.vmap(simulate)`` to round-off (each device runs that program on its shard; only
        the length of the vectorized loops differs, which can change XLA's FMA contraction).
        With padding the first ``B`` rows are returned (their layout is then XLA's choice).

    Call it under :func:`geomjax.jit` (or ``jax.jit``; like :func:`simulate`, it traces on
    every eager call); it is differentiable (reverse mode sums the cotangents of replicated arguments over devices).
    """
    if mesh is None:
        mesh = batch_mesh()
    if not isinstance(mesh, Mesh) or len(mesh.axis_names) != 1:
        raise ValueError(
            f"simulate_sharded: argument 'mesh' must be a one-dimensional jax.sharding.Mesh, got {mesh!r}"
        )
    if not isinstance(method, AbstractMethod):
        raise ValueError(
            f"simulate_sharded: argument 'method' must be a geomjax method (e.g. LGVI()), got {method!r}"
        )
    (axis,) = mesh.axis_names
    n_dev = mesh.devices.size

    state_leaves = jax.tree_util.tree_leaves(states0)
    if not state_leaves or any(jnp.ndim(x) == 0 for x in state_leaves):
        raise ValueError(
            "simulate_sharded: argument 'states0' must be a batch of states (every leaf with a "
            "leading batch axis)"
        )
    sizes = {jnp.shape(x)[0] for x in state_leaves}
    sys_params, sys_static = eqx.partition(system, eqx.is_array)
    m_params, m_static = eqx.partition(method, eqx.is_array)
    sys_axes = _expand_axes(system_axes, sys_params, "system_axes")
    feedback = callable(controls) and not isinstance(controls, jax.Array)
    ctrl = None if feedback else controls
    ctrl_axes = _expand_axes(controls_axes, ctrl, "controls_axes")
    sizes |= _batch_size(sys_params, sys_axes, "system")
    sizes |= _batch_size(ctrl, ctrl_axes, "controls")
    if len(sizes) != 1:
        raise ValueError(
            f"simulate_sharded: the batched leaves of 'states0', 'system' and 'controls' must share "
            f"one leading batch size, got sizes {sorted(sizes)}"
        )
    (B,) = sizes
    extra = _padding(B, n_dev, pad, "simulate_sharded: the batch size of 'states0'")
    if kwargs.pop("check_inputs", True) and hasattr(system, "check_state"):
        # checked on the whole batch before sharding: equinox's runtime errors are not
        # expressible inside shard_map (a cond whose branches differ in replication)
        t0 = kwargs.get("t0", 0.0)

        def check(sy, s):
            sy = eqx.combine(sy, sys_static)
            if getattr(sy, "time_aware", False):
                return sy.check_state(s, "states0", t=t0)
            return sy.check_state(s, "states0")

        states0 = jax.vmap(check, in_axes=(sys_axes, 0))(sys_params, states0)
    kwargs["check_inputs"] = False
    states_axes = jax.tree_util.tree_map(lambda _: 0, states0)
    states0 = _pad(states0, states_axes, extra)
    sys_params = _pad(sys_params, sys_axes, extra)
    ctrl = _pad(ctrl, ctrl_axes, extra)

    def spec(a):
        return PartitionSpec(axis) if a == 0 else PartitionSpec()

    def local(sys_p, m_p, s0, h, u):
        # the program of one device: vmap of simulate over its shard of the batch
        meth = eqx.combine(m_p, m_static)

        def one(sy, s, c):
            c = controls if feedback else c
            return simulate(eqx.combine(sy, sys_static), meth, s, h, steps, c, **kwargs)

        return jax.vmap(one, in_axes=(sys_axes, 0, ctrl_axes))(sys_p, s0, u)

    in_specs = (
        jax.tree_util.tree_map(lambda x, a: spec(a), sys_params, sys_axes),
        jax.tree_util.tree_map(lambda _: PartitionSpec(), m_params),
        jax.tree_util.tree_map(lambda _: PartitionSpec(axis), states0),
        PartitionSpec(),
        jax.tree_util.tree_map(lambda x, a: spec(a), ctrl, ctrl_axes),
    )
    dt = jnp.asarray(dt)
    # check_vma=False: the scans of simulate start from replicated constants (e.g. the running
    # residual maximum) and become batch-varying; the replication types would demand casts in
    # every method.  Correctness does not depend on it: all outputs are split along the batch.
    sol = jax.shard_map(
        local, mesh=mesh, in_specs=in_specs, out_specs=PartitionSpec(axis), check_vma=False
    )(sys_params, m_params, states0, dt, ctrl)
    if extra:
        sol = jax.tree_util.tree_map(lambda x: x[:B], sol)
    return sol


def shard_batch(tree, mesh: Mesh | None = None):
    """Place a batch (leading axis) on ``mesh``, split along its axis (no copy if already there)."""
    mesh = batch_mesh() if mesh is None else mesh
    sharding = NamedSharding(mesh, PartitionSpec(mesh.axis_names[0]))
    return jax.tree_util.tree_map(lambda x: jax.device_put(x, sharding), tree)


def _broadcast_axes(in_axes, args):
    """``in_axes`` of ``jax.vmap`` (an int/None, or a tuple of per-argument prefixes) → one
    0/None per array leaf of ``args``."""
    if in_axes is None or isinstance(in_axes, int | np.integer):
        in_axes = (in_axes,) * len(args)
    if not isinstance(in_axes, tuple | list) or len(in_axes) != len(args):
        raise ValueError(
            f"shard_vmap: argument 'in_axes' must be 0, None or a tuple with one entry per "
            f"positional argument ({len(args)}), got {in_axes!r}"
        )

    def expand(a, sub):
        if a not in (None, 0):
            raise ValueError(f"shard_vmap: the leaves of 'in_axes' must be 0 or None, got {a!r}")
        return jax.tree_util.tree_map(lambda _: a, sub)

    out = []
    for i, (ax, arg) in enumerate(zip(in_axes, args)):
        try:
            out.append(jax.tree_util.tree_map(expand, ax, arg, is_leaf=lambda x: x is None))
        except ValueError as e:
            if "shard_vmap" in str(e):
                raise
            raise ValueError(
                f"shard_vmap: entry {i} of 'in_axes' must be 0, None or a pytree prefix of "
                f"argument {i} ({e})"
            ) from None
    return tuple(out)


def shard_vmap(fun, in_axes=0, *, mesh: Mesh | None = None, pad: bool = False):
    """``jax.vmap(fun, in_axes)`` with the batch split over the devices of ``mesh``.

    Every device runs ``jax.vmap(fun)`` on its shard of the batch (:func:`jax.shard_map`); the
    result has the structure of ``jax.vmap(fun, in_axes)(*args)``, every array with a leading
    batch axis, sharded along it.  The arguments may be any pytrees, equinox modules included
    (their non-array leaves are shared by the batch): a batch of
    :class:`~geomjax.control.trajopt.OptimalControlProblem` (e.g. targets, initial states,
    parameters stacked by ``jax.vmap`` or ``eqx.filter_vmap``) for
    :func:`~geomjax.control.trajopt.solve_ocp`, of plants for
    :func:`~geomjax.control.run_mpc`, of records for a fit.

    Arguments:
        fun: a function of positional arguments returning a pytree (non-array leaves of the
            result, e.g. static fields of a module, must not depend on the batch member).
        in_axes: ``0`` (every array leaf batched), ``None`` (shared) or a tuple with one entry
            per positional argument: ``0``/``None`` or a pytree prefix of that argument with
            0/None leaves (as ``jax.vmap``; no other axis).
        mesh: a one-dimensional :class:`jax.sharding.Mesh` (default :func:`batch_mesh`: every
            device of every process; with ``jax.distributed.initialize()`` the batch is split
            across processes, each passing the whole batch — the arguments are global values).
        pad: if the batch size is not a multiple of the number of devices, repeat the last
            member up to the next multiple and drop the extra results (otherwise a
            ``ValueError``).

    Returns a function of the same arguments; call it under :func:`geomjax.jit` (or
    ``jax.jit``; it traces on every eager call).  The values are those of ``jax.vmap(fun, in_axes)`` to round-off (only the
    length of the vectorized loops differs, which can change XLA's FMA contraction).
    """

    def run(*args):
        mesh_ = batch_mesh() if mesh is None else mesh
        if not isinstance(mesh_, Mesh) or len(mesh_.axis_names) != 1:
            raise ValueError(
                f"shard_vmap: argument 'mesh' must be a one-dimensional jax.sharding.Mesh, got {mesh_!r}"
            )
        (axis,) = mesh_.axis_names
        n_dev = mesh_.devices.size
        params, static = eqx.partition(args, eqx.is_array)
        axes = _broadcast_axes(in_axes, params)
        sizes = set()
        for i, (p, a) in enumerate(zip(params, axes)):
            sizes |= _batch_size(p, a, f"argument {i}", "shard_vmap")
        if len(sizes) != 1:
            raise ValueError(
                "shard_vmap: the batched leaves of the arguments must share one leading batch "
                f"size (in_axes=0 marks them), got sizes {sorted(sizes) or 'none (nothing batched)'}"
            )
        (B,) = sizes
        extra = _padding(B, n_dev, pad, "shard_vmap: the batch size")
        params = tuple(_pad(p, a, extra) for p, a in zip(params, axes))
        out_static = []

        def local(ps):
            def one(*p):
                out = fun(*eqx.combine(p, static))
                arrays, st = eqx.partition(out, eqx.is_array)
                if not out_static:
                    out_static.append(st)
                return arrays

            return jax.vmap(one, in_axes=axes)(*ps)

        in_specs = (
            tuple(
                jax.tree_util.tree_map(
                    lambda x, a: PartitionSpec(axis) if a == 0 else PartitionSpec(), p, ax
                )
                for p, ax in zip(params, axes)
            ),
        )
        # check_vma=False: as in simulate_sharded, loops start from replicated constants and
        # become batch-varying; every output is split along the batch
        out = jax.shard_map(
            local, mesh=mesh_, in_specs=in_specs, out_specs=PartitionSpec(axis), check_vma=False
        )(params)
        if extra:
            out = jax.tree_util.tree_map(lambda x: x[:B], out)
        return eqx.combine(out, out_static[0])

    return run
