"""Eager calls: values that Python knows now, and programs that compile quickly.

**Known values.**
An input check (finite values, group membership) on a concrete array runs eagerly in NumPy or as
one cached program and raises ``ValueError``; on a tracer it is compiled into the caller's program
with :func:`equinox.error_if`.  Under an *eager* ``jax.grad``/``jax.jvp`` the arguments are
tracers too, but their primal values are concrete: checked as tracers, every small operation of
the check was dispatched and compiled on its own (the README's gradient example compiled four
one-operation programs for the finiteness check of its initial momentum).  :func:`known_value`
returns those primal values, so such checks take the eager path.

**Host tier.**  A group operation, an input check, ``make_state``'s momentum or a metric function
called eagerly is one small program (:func:`eager_jit`, :func:`quick_compiled`).  Its first
:data:`HOST_CALLS` calls per signature are not compiled at all: NumPy evaluates the program's
jaxpr (:mod:`geomjax._internal.host_eval`), which costs the trace (10–70 ms) instead of XLA's code
generation (0.1–0.3 s); a later call compiles it, and from then on it dispatches in microseconds.

**Quick compiles.**  Compiled, such a program's run time is the dispatch either way, so XLA's
backend optimizations and its MLIR fusion emitters only cost compile time
(``xla_backend_optimization_level=0`` and the legacy elemental emitters,
``xla_cpu_use_fusion_emitters=False``; figures: the architecture page, "Measured design
choices").  Only such one-shot programs use these options: the
time loops and solvers keep XLA's defaults.  Under an outer ``jit`` the function is inlined and
the options do not apply."""

from __future__ import annotations

import functools
import sys

import equinox as eqx
import jax
import numpy as np
from jax._src import core as jax_core  # trace_state_clean: no public equivalent

from . import host_eval as _host_eval
from .program_cache import ProgramCache
from .tracing import any_traced, is_traced

#: XLA:CPU's legacy elemental IR emitters instead of its MLIR fusion emitters (jaxlib 0.10's
#: default): the same kernels, compiled faster (an option of the CPU backend, ignored by others)
LEGACY_EMITTERS = {"xla_cpu_use_fusion_emitters": False}

#: XLA options of the small eager programs (see the module docstring)
EAGER_COMPILER_OPTIONS = {"xla_backend_optimization_level": 0, **LEGACY_EMITTERS}


def _at_top_level() -> bool:
    """Whether no transformation is being traced now (JAX accepts compiler options only on a
    top-level program; a group operation on constant arrays inside a ``jit`` is not one)."""
    clean = getattr(jax_core, "trace_state_clean", None)
    return bool(clean()) if clean is not None else False  # unknown: the plain program


def _under_eager_autodiff_only() -> bool:
    """Whether the transformations being traced now are eager ``jax.grad``/``jax.jvp`` (forward-
    and reverse-mode traces) over eager evaluation, with no ``jit`` or ``vmap`` around them:
    a function of concrete arrays called there runs as a program of its own."""
    try:
        from jax._src.interpreters.ad import JVPTrace, LinearizeTrace

        ctx = jax_core.trace_ctx
        if ctx.axis_env is not jax_core.top_axis_env:
            return False
        t = ctx.trace
        while isinstance(t, JVPTrace | LinearizeTrace):
            t = t.parent_trace
        return t is jax_core.eval_trace
    except Exception:  # JAX internals moved: the plain program
        return False


#: Eager calls of one signature (function, shapes, dtypes, static arguments) evaluated on the
#: host (:mod:`geomjax._internal.host_eval`) before the program is compiled.
HOST_CALLS = 2


class _Tiered:
    """An eager program in two tiers.

    With concrete arguments, the first :data:`HOST_CALLS` calls of a signature are evaluated by
    NumPy from the program's jaxpr (no XLA compilation; the jaxpr is traced once and kept), later
    calls run ``quick`` (at top level) or ``plain`` (inside a transformation, e.g. a group
    operation on a constant under an eager ``grad``, which JAX would compile on its own; inside
    a ``jit`` the host's result is a constant of the caller's program).  Falls back to the
    compiled program for large inputs, for primitives the interpreter does not know and for
    arguments it cannot key.  With a tracer argument it is ``plain``, traced into the caller."""

    def __init__(self, fn, quick, plain):
        self.fn, self.quick, self.plain = fn, quick, plain
        # signature -> [host calls so far, traced program], or None: compiled from the first call
        self.host = ProgramCache("host-evaluated eager programs")

    def compiled(self, *args, **kwargs):
        if _at_top_level():
            return self.quick(*args, **kwargs)
        if _under_eager_autodiff_only():
            # concrete arguments under an eager grad/jvp (e.g. the group check of a state whose
            # primal is known, geomjax._internal.eager.known_value): no tangent to carry, so the quick
            # program, run outside the autodiff traces (JAX takes compiler options only there)
            with jax_core.eval_context():
                return self.quick(*args, **kwargs)
        return self.plain(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        if any_traced(args, kwargs):
            return self.plain(*args, **kwargs)
        dynamic, static = eqx.partition((args, kwargs), eqx.is_array)
        flat, treedef = jax.tree_util.tree_flatten(dynamic)
        try:
            static_leaves, static_def = jax.tree_util.tree_flatten(static)
            key = (treedef, static_def, tuple(static_leaves), tuple(_spec(x) for x in flat))
            entry = self.host.get(key, [0, None])
        except TypeError:  # an unhashable static argument
            return self.compiled(*args, **kwargs)
        if entry is None or entry[0] >= HOST_CALLS or not _host_eval.small(flat):
            return self.compiled(*args, **kwargs)
        try:
            if entry[1] is None:
                entry[1] = self._trace(args, kwargs)
            out = self._on_host(entry[1], flat)
        except _host_eval.Unsupported:
            self.host.put(key, None)
            return self.compiled(*args, **kwargs)
        entry[0] += 1
        if entry[0] >= HOST_CALLS:
            entry[1] = None  # compiled from now on: the jaxpr is not needed any more
        self.host.put(key, entry)
        return out

    def _trace(self, args, kwargs):
        closed, out_struct, out_static = eqx.filter_make_jaxpr(self.fn)(*args, **kwargs)
        if any(getattr(v.aval, "weak_type", False) for v in closed.jaxpr.outvars):
            raise _host_eval.Unsupported("weakly typed output")  # device_put would make it strong
        return closed, out_struct, out_static

    @staticmethod
    def _on_host(traced, flat):
        closed, out_struct, out_static = traced
        values = _host_eval.evaluate(closed, flat)
        struct = jax.tree_util.tree_structure(out_struct)
        out = jax.tree_util.tree_unflatten(struct, [jax.device_put(v) for v in values])
        return eqx.combine(out, out_static)


def _spec(x):
    return (np.shape(x), np.dtype(x.dtype), getattr(x, "weak_type", False))


def eager_jit(fn, **jit_kwargs):
    """``jax.jit(fn, **jit_kwargs)``; called at top level (eagerly), its first calls of each
    signature are evaluated on the host (:class:`_Tiered`) and then it is compiled without XLA's
    backend optimizations: for small programs whose run time is their dispatch.  Under a
    transformation it is the plain ``jax.jit`` (inlined in an outer ``jit``)."""
    quick = jax.jit(fn, compiler_options=EAGER_COMPILER_OPTIONS, **jit_kwargs)
    return functools.wraps(fn)(_Tiered(fn, quick, jax.jit(fn, **jit_kwargs)))


def quick_compiled(fn):
    """``fn`` under :func:`equinox.filter_jit`; called at top level with no tracer argument
    (eagerly), its first calls of each signature are evaluated on the host (:class:`_Tiered`)
    and then it is compiled without XLA's backend optimizations; compiled normally otherwise
    (e.g. under an eager ``grad``), inlined in an outer ``jit``."""
    quick = eqx.filter_jit(fn, compiler_options=EAGER_COMPILER_OPTIONS)
    return functools.wraps(fn)(_Tiered(fn, quick, eqx.filter_jit(fn)))


def _under_eager_vjp() -> bool:
    """Whether the call is inside an eager reverse-mode derivative and nothing else: one
    linearization (``jax.grad``, ``jax.value_and_grad``, ``jax.vjp``, ``jax.jacrev``'s
    forward half) over eager evaluation, no ``jit``/``vmap`` around.  The nearest frame of
    JAX's API must be ``vjp``: ``jax.linearize`` linearizes the same way but then evaluates the
    tangent map, which a ``custom_vjp`` cannot do.  Anything else (JAX's internals moved):
    ``False``, the plain program."""
    try:
        from jax._src.interpreters.ad import LinearizeTrace

        ctx = jax_core.trace_ctx
        t = ctx.trace
        if ctx.axis_env is not jax_core.top_axis_env or not isinstance(t, LinearizeTrace):
            return False
        if t.parent_trace is not jax_core.eval_trace:
            return False
        frame = sys._getframe(2)
        while frame is not None:
            if frame.f_globals.get("__name__") == "jax._src.api":
                return frame.f_code.co_name == "vjp"
            frame = frame.f_back
    except Exception:  # pragma: no cover - JAX's internals moved: the plain program
        return False
    return False


def _closes_over_tracer(static) -> bool:
    """Whether a function among ``static``'s leaves (or its ``__self__``) closes over a tracer
    (e.g. a feedback law of a gain being differentiated): a program compiled on its own could
    not see that tracer.  One level of closure cells is looked at; deeper ones are caught by
    JAX's ``UnexpectedTracerError`` when the program is traced."""
    for leaf in jax.tree_util.tree_leaves(static):
        for fn in (leaf, getattr(leaf, "__func__", None)):
            for cell in getattr(fn, "__closure__", None) or ():
                try:
                    contents = cell.cell_contents
                except ValueError:  # an empty cell
                    continue
                if any_traced(contents):
                    return True
        owner = getattr(leaf, "__self__", None)
        if owner is not None and any_traced(owner):
            return True
    return False


class _EagerVJP:
    """Reverse mode of ``fn`` under an eager ``jax.grad``/``jax.vjp`` as two top-level programs
    compiled with ``options``: ``jax.vjp`` of ``fn`` (its value and the pullback's residuals)
    and the pullback, joined to the caller's derivative by a ``jax.custom_vjp``.  Inside the
    caller's linearization a program of ``fn`` is not top-level, so JAX would compile it with
    XLA's defaults; these two are.  The values are those of JAX's own reverse mode through
    ``fn`` (the same ``jax.vjp``), to round-off."""

    def __init__(self, fn):
        self.fn = fn
        # options -> (forward, pullback)
        self.programs = ProgramCache("eager reverse-mode programs")
        self.plain_pullback = eqx.filter_jit(_apply_pullback)

    def _programs(self, options):
        key = tuple(sorted(options.items()))
        programs = self.programs.get(key)
        if programs is None:
            fn = self.fn

            def forward(diff, rest):
                def f(d):
                    args, kwargs = eqx.combine(d, rest)
                    return fn(*args, **kwargs)

                return jax.vjp(f, diff)

            programs = self.programs.put(
                key,
                (
                    eqx.filter_jit(forward, compiler_options=options),
                    eqx.filter_jit(_apply_pullback, compiler_options=options),
                ),
            )
        return programs

    def __call__(self, options, args, kwargs):
        """``fn(*args, **kwargs)``, differentiable; ``None`` where this route does not apply
        (a closed-over tracer)."""
        from .xla_flags import PROGRAM_OPTION, program_small_loops

        diff, rest = eqx.partition((args, kwargs), eqx.is_inexact_array)
        if _closes_over_tracer(rest):
            return None
        forward, pullback = self._programs(options)
        primal = jax.tree_util.tree_map(known_value, diff)
        small = PROGRAM_OPTION in options
        try:
            with jax_core.eval_context(), program_small_loops(small):
                out, vjp_fn = forward(primal, rest)
        except jax.errors.UnexpectedTracerError:
            return None
        plain_pullback = self.plain_pullback

        @jax.custom_vjp
        def through(d):
            return out

        def through_fwd(d):
            return out, vjp_fn

        def through_bwd(vjp_fn, ct):
            if _at_top_level():
                with program_small_loops(small):
                    return pullback(vjp_fn, ct)
            return plain_pullback(vjp_fn, ct)  # e.g. jax.jacrev's vmapped pullback

        through.defvjp(through_fwd, through_bwd)
        return through(diff)


def _apply_pullback(vjp_fn, ct):
    return vjp_fn(ct)


def top_level_options(
    fn,
    compiler_options=None,
    *,
    small_loops: bool = False,
    jit_under_trace: bool = True,
    library_fusions: bool = True,
    traced_without_setting=None,
):
    """``fn`` under :func:`equinox.filter_jit`, compiled with ``compiler_options`` when called at
    top level with no tracer argument (JAX accepts compiler options only on a top-level program);
    compiled normally under a transformation (e.g. an eager ``grad``), inlined in an outer
    ``jit``.

    ``compiler_options``: for programs that run once per call site and whose run time the
    options leave unchanged (measured: ``benchmarks/bench_compile_options.py``), e.g.
    :func:`geomjax.diagnostics` with :data:`LEGACY_EMITTERS`.

    ``small_loops``: also XLA:CPU's raised small-loop threshold for this program alone
    (:func:`geomjax._internal.xla_flags.small_loop_options`, read at each call: switched off by
    ``configure(xla_small_loops=False)``), traced within
    :func:`~geomjax._internal.xla_flags.program_small_loops` so that loops take the form that
    runs fastest with it; under an eager ``jax.grad``/``jax.vjp`` the forward and backward
    passes run as two such top-level programs (:class:`_EagerVJP`).  For the time loops and
    solvers: their loops then compile into single kernels whatever the process's ``XLA_FLAGS``
    and import order.

    ``library_fusions=False``: also without XLA:CPU's library fusions
    (:func:`geomjax._internal.xla_flags.no_library_fusion_options`): for programs of small
    products run many times (model predictive control), whose iterations run 2–3× faster and
    compile 1.4–2.2× longer.

    ``jit_under_trace=False``: under a transformation ``fn`` is called as it is, not through
    ``equinox.filter_jit`` (for a function that was not jitted before: inside a ``jit`` it is
    inlined either way, but under ``vmap`` a jitted function is traced with unbatched values,
    and code that chooses its form by the batch, e.g. the SO(3) Newton loop, would see none).

    ``traced_without_setting``: with ``small_loops``, called with the arguments where ``fn`` is
    traced into a caller's program that does not get the small-loop setting (a user's
    ``jax.jit``, an eager ``jax.vmap``), before tracing it: e.g.
    :func:`~geomjax._internal.xla_flags.warn_loop_without_setting`."""
    from .xla_flags import (
        PROGRAM_OPTION,
        no_library_fusion_options,
        program_small_loops,
        small_loop_options,
        small_loops_traced,
        tracing_small_loops,
    )

    # inside another program, traced for that program's setting: one trace cache per setting.
    # Code traced within program_small_loops takes another form (e.g. a rolled Newton loop),
    # which a shared cache of traces would hand to a program compiled without the setting; the
    # second is a partial, another function object, so that equinox's and JAX's caches (keyed
    # on the function) keep the two apart
    plains = {False: eqx.filter_jit(fn), True: eqx.filter_jit(functools.partial(fn))}
    variants = ProgramCache("top-level programs with compiler options")  # options -> jitted

    def _options():
        options = dict(compiler_options or {})
        if small_loops:
            options.update(small_loop_options())
        if not library_fusions:
            options.update(no_library_fusion_options())
        return options

    def _variant(options):
        key = tuple(sorted(options.items()))
        jitted = variants.get(key)
        if jitted is None:
            jitted = variants.setdefault(key, eqx.filter_jit(fn, compiler_options=options))
        return jitted

    eager_vjp = _EagerVJP(fn) if small_loops else None

    @functools.wraps(fn)
    def call(*args, **kwargs):
        options = _options() if _at_top_level() and not any_traced(args, kwargs) else {}
        if not options and eager_vjp is not None and _under_eager_vjp():
            # an eager jax.grad through fn: its forward and backward as top-level programs
            # with the options (within the caller's linearization JAX would compile fn with
            # XLA's defaults)
            options = _options()
            out = eager_vjp(options, args, kwargs) if options else None
            if out is not None:
                return out
            options = {}
        if not options:
            if small_loops and traced_without_setting is not None and not small_loops_traced():
                traced_without_setting(*args, **kwargs)
            if not jit_under_trace and not _at_top_level():
                return fn(*args, **kwargs)
            return plains[tracing_small_loops()](*args, **kwargs)
        with program_small_loops(PROGRAM_OPTION in options):
            return _variant(options)(*args, **kwargs)

    def lower(*args, **kwargs):
        """Ahead of time, as ``equinox.filter_jit(...).lower``: the top-level program with its
        options (``.compile()`` then compiles it with them)."""
        options = _options()
        if not options:
            return plains[tracing_small_loops()].lower(*args, **kwargs)
        with program_small_loops(PROGRAM_OPTION in options):
            return _variant(options).lower(*args, **kwargs)

    call.lower = lower
    return call


def known_value(x):
    """``x`` as a concrete array if its value is known at Python time, else None.

    Known: NumPy and JAX arrays, Python numbers, and the tracers of eager forward- and
    reverse-mode differentiation (``JVPTracer``/``LinearizeTracer``, whose primal is concrete).
    Unknown (None): tracers of ``jit``, ``vmap``, ``scan`` and the like."""
    if is_traced(x):
        to_concrete = getattr(x, "to_concrete_value", None)  # JAX's own concreteness query
        return None if to_concrete is None else to_concrete()
    if isinstance(x, jax.Array | np.ndarray | float | int | np.number):
        return x
    return None
