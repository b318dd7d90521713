"""Opt-in: take the objects that exist now out of the cyclic garbage collector's scans
(:func:`gc.freeze`).

Tracing and lowering a program allocate hundreds of thousands of small Python objects (jaxpr
variables, equations, MLIR values), so CPython runs full (generation-2) collections during a
compilation, and each one walks every tracked object of the process: after ``import jax`` and
geomjax several hundred thousand, nearly all of them modules, functions and classes that live as
long as the process.  Frozen, they are no longer walked (they stay alive and are still freed by
reference counting; only cyclic garbage among them would no longer be collected — module-level
objects never are anyway).

**Off by default** (``import geomjax`` changes no process state): call
``geomjax.configure(gc_freeze=True)`` after your imports, or put ``GEOMJAX_GC_FREEZE=1`` in
the environment (then ``import geomjax`` freezes at its end).  ``gc.unfreeze()`` undoes it.

The import-order benchmark (``benchmarks/bench_import_order.py``) reports the compile times
with and without it; figures: the architecture page, "Measured design choices".
"""

from __future__ import annotations

import gc
import os

__all__ = ["freeze_import_time_objects", "freeze_now", "opted_in"]

_ON = ("1", "true", "yes", "on")


def opted_in(environ=None) -> bool:
    """Whether ``GEOMJAX_GC_FREEZE`` asks for the freeze at import (``1``/``true``/``yes``/``on``)."""
    env = os.environ if environ is None else environ
    return env.get("GEOMJAX_GC_FREEZE", "").strip().lower() in _ON


def freeze_now() -> None:
    """:func:`gc.freeze` (``geomjax.configure(gc_freeze=True)``)."""
    gc.freeze()


def freeze_import_time_objects(environ=None) -> bool:
    """At the end of ``import geomjax``: :func:`gc.freeze` if ``GEOMJAX_GC_FREEZE`` opts in
    (:func:`opted_in`); returns whether it froze."""
    if not opted_in(environ):
        return False
    freeze_now()
    return True
