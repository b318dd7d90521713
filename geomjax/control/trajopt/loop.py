"""The one loop that drives every solver (``init``/``step``/``terminate``, see
:class:`~geomjax.control.trajopt.solvers.AbstractOCPSolver`), and the progress monitor of eager
solves: the wall time of each iteration and a tqdm bar, reported from the compiled loop by
``jax.debug.callback``."""

from __future__ import annotations

import time

import jax

__all__ = ["iterate"]


def iterate(problem, solver, state, monitor: bool = False):
    """Run ``solver.step`` until ``solver.terminate`` says done, as one ``lax.while_loop`` (a
    fixed iteration cap lives in the solver's state: jittable and vmappable; a finished member
    of a batch no longer changes).  ``monitor``: report each iteration to the host
    (:class:`Monitor`)."""

    def body(s):
        s1 = solver.step(problem, s)
        if monitor:
            jax.debug.callback(_tick, s1.it - 1, s1.cost, ordered=True)
        return s1

    return jax.lax.while_loop(lambda s: ~solver.terminate(problem, s)[0], body, state)


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
