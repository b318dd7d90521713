"""The driver of every solver (:class:`~geomjax.control.trajopt.solvers.AbstractOCPSolver`'s
``init``/``step``/``terminate``/``postprocess``), as optimistix's ``iterative_solve`` drives its
minimisers: the solver provides its algorithm, the driver owns the bookkeeping — the iteration
counter, the cap ``max_iters``, the per-iteration history, the non-finite check and the status
of a solve stopped by the cap — and the progress monitor of eager solves (the wall time of each
iteration and a tqdm bar, reported from the compiled loop by ``jax.debug.callback``)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from ..status import MAX_ITERS, NONFINITE, SUCCESSFUL

__all__ = ["History", "iterate"]


class History(eqx.Module):
    """A per-iteration record: every field an array ``(max_iters,)``, NaN after the last
    iteration.  A solver declares its record as a subclass (``history_type``); the driver
    writes row ``i`` from the values the solver's ``step`` returns for iteration ``i``."""

    @classmethod
    def empty(cls, max_iters: int, dtype) -> History:
        """Every field NaN ``(max_iters,)``."""
        nan = jnp.full((max_iters,), jnp.nan, dtype)
        return cls(**{f.name: nan for f in dataclasses.fields(cls)})

    @property
    def max_iters(self) -> int:
        return getattr(self, dataclasses.fields(self)[0].name).shape[0]

    def record(self, it, **values):
        """The history with entry ``it`` of each named field set to its value."""
        new = {k: getattr(self, k).at[it].set(v) for k, v in values.items()}
        return eqx.tree_at(lambda h: [getattr(h, k) for k in new], self, list(new.values()))

    def as_dict(self) -> dict:
        """The fields by name (:attr:`OCPSolution.history`)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


class _Carry(eqx.Module):
    """The driver's loop state: the solver's state and the bookkeeping around it."""

    state: Any
    it: jax.Array  # iterations run
    history: History
    finite: jax.Array  # whether the solver's cost is finite (else the loop stops: NONFINITE)


def _cost(solver, state):
    cost = getattr(state, "cost", None)
    if cost is None or jnp.shape(cost) != ():
        raise ValueError(
            f"{type(solver).__name__}: its state must have a scalar field 'cost' (the objective "
            "at the iterate: the driver stops on NaN or inf and reports it to the progress "
            f"monitor), got {type(state).__name__}"
        )
    return cost


def _checked_record(solver, history, record):
    names = {f.name for f in dataclasses.fields(history)}
    if not isinstance(record, dict) or not set(record) <= names:
        got = sorted(record) if isinstance(record, dict) else type(record).__name__
        raise ValueError(
            f"{type(solver).__name__}.step must return (state, record), record a dict of the "
            f"fields of its history_type {type(history).__name__} {sorted(names)}, got {got}"
        )
    return record


def iterate(problem, solver, xs, us, feasible, max_iters: int, warm=None, monitor: bool = False):
    """Solve ``problem`` with ``solver`` from the trajectory ``xs``, ``us`` (``feasible``: ``xs``
    is a rollout of ``us``) and the rest of a warm start ``warm``
    (:class:`~geomjax.control.trajopt.WarmStart` or None), at most ``max_iters`` iterations
    (static); returns the solver's :class:`~geomjax.control.trajopt.OCPSolution`.

    One ``lax.while_loop`` of ``solver.step`` until ``solver.terminate`` says done, the cap is
    reached or the state's ``cost`` is NaN or inf: jittable and vmappable (a finished member of
    a batch no longer changes).  The driver owns

    * the iteration counter and the cap: a solve the cap stopped whose ``terminate`` reported
      no failure (``SUCCESSFUL`` while not done) is status 1 ``"max_iters"``; a failure code
      reported while not done is kept (an augmented Lagrangian's ``"constraints_not_met"``);
    * the history: a ``solver.history_type`` of ``max_iters`` rows, NaN after the last
      iteration, row ``i`` the record ``step`` returned for iteration ``i``;
    * non-finite handling: an initial cost that is NaN or inf runs no iteration, and a step that
      leaves one stops the loop, both with status 3 ``"nonfinite"``.

    ``monitor``: report each iteration to the host (:class:`Monitor`)."""
    dtype = problem.dtype
    state = solver.init(problem, xs, us, feasible, warm)
    history = solver.history_type.empty(max_iters, dtype)
    carry = _Carry(state, jnp.zeros((), jnp.int32), history, jnp.isfinite(_cost(solver, state)))

    def cond(c):
        done, _ = solver.terminate(problem, c.state)
        return ~done & (c.it < max_iters) & c.finite

    def body(c):
        out = solver.step(problem, c.state)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(
                f"{type(solver).__name__}.step must return (state, record), got "
                f"{type(out).__name__}: a solver written for the earlier protocol (step returning "
                "the state, init taking max_iters) needs the changes of the extending guide"
            )
        s1, record = out
        history = c.history.record(c.it, **_checked_record(solver, c.history, record))
        cost = _cost(solver, s1)
        if monitor:
            jax.debug.callback(_tick, c.it, cost, ordered=True)
        return _Carry(s1, c.it + 1, history, jnp.isfinite(cost))

    c = jax.lax.while_loop(cond, body, carry)
    done, status = solver.terminate(problem, c.state)
    capped = ~done & (status == SUCCESSFUL)
    status = jnp.where(c.finite, jnp.where(capped, MAX_ITERS, status), NONFINITE)
    return solver.postprocess(problem, c.state, c.it, status.astype(jnp.int32), c.history)


class Monitor:
    """Host side of an eager solve: the wall time at the end of each iteration (reported by
    ``jax.debug.callback`` from the compiled loop) and the tqdm progress bar, created after the
    first iteration (which includes the compilation), as :func:`geomjax.control.optimize` does."""

    active: Monitor | None = None  # the solve in progress (the callback is one fixed function)

    def __init__(self, total, progress, desc):
        self.total, self.progress, self.desc = total, progress, desc
        self.times, self.bar = [], None
        self.t0 = time.perf_counter()

    def tick(self, it, cost):
        now = time.perf_counter() - self.t0
        if not self.times and self.progress:
            try:
                from tqdm.auto import tqdm
            except ImportError:  # a declared dependency, but the solver must not need it
                tqdm = None
            if tqdm is not None:
                desc = f"{self.desc} (compile + 1st iteration {now:.2f} s)"
                self.bar = tqdm(total=self.total, desc=desc, leave=False)
        self.times.append(now)
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(cost=f"{cost:.6e}", refresh=False)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _tick(it, cost):
    m = Monitor.active
    if m is not None:
        m.tick(int(it), float(cost))
