"""XLA:CPU compiles small loops into single kernels: geomjax raises the size limit of that pass
for its own programs (per program, the default) or, opted in, for the whole process.

XLA's CPU runtime executes a compiled program as a sequence of "thunks", one per fused kernel,
and a ``while`` loop (every ``lax.scan`` over time steps, every fixed-iteration Newton solve)
re-dispatches each kernel of its body on every iteration: ~0.1–0.4 µs apiece, whatever the
kernel computes.  A step of a variational integrator is a few dozen small kernels, so at small
batch sizes the dispatches, not the arithmetic, set the time.  XLA has a pass that compiles a
loop into one kernel when the bytes its body touches (XLA's cost estimate of one iteration)
stay under ``xla_cpu_small_while_loop_byte_threshold``: 1 kB by default.

The rule, precisely (XLA:CPU's ``SmallWhileLoopHoistingPass``, run last, after fusion and copy
insertion): a ``while`` whose body has no custom call, sort, scatter, FFT or collective is moved
into a call marked ``xla_cpu_small_call`` (one kernel) when ``HloCostAnalysis``'s bytes accessed
by the ``while`` is under the threshold; for a ``while`` that is one iteration: the sum over the
body's and the condition's instructions of the bytes each reads and writes (a fused kernel: its
operands as read, its outputs; a copy: twice its size; a tuple: its pointers).  A stacked
output (an in-place dynamic-update-slice) counts its update, not its buffer; a nested loop one
iteration of its body.  Measured with the threshold bisected per loop (free body, LGVI,
float64): the loop over the steps of a block ~980 bytes (one kernel by default), a loop saving
every step ~1270, reverse mode's loops ~1.1-3.5 kB.  :func:`compiled_loops` reads from a
compiled program which loops are one kernel; where a time loop that is not one kernel with
XLA's defaults is traced into a program without the setting, geomjax warns once
(:func:`warn_loop_without_setting`).

**Per program, by default** (the second half of this module): geomjax's top-level programs
(``top_level_options(..., small_loops=True)`` in :mod:`geomjax._internal.eager`) and those of
:func:`geomjax.jit` are compiled with the threshold raised to 16 MiB in *their* compile options
(:func:`small_loop_options`).  ``import geomjax`` changes no process state; the first such
program installs a wrapper of JAX's ``get_compile_options`` that adds the entry for programs
that ask for it and passes every other program through unchanged.

**For the whole process, opt-in**: ``geomjax.configure(xla_small_loops=True)`` before JAX's
first computation, or ``GEOMJAX_XLA_FLAGS=1`` in the environment (read at ``import geomjax``):
either adds :data:`XLA_FLAG` (threshold 16 MiB) to ``XLA_FLAGS``, so that the user's own
``jax.jit`` programs get it too.  Setting
``XLA_FLAGS=--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=16777216``
yourself before Python starts does the same.  Nothing is changed if ``XLA_FLAGS`` already
sets ``xla_backend_extra_options`` (yours win).  ``GEOMJAX_XLA_FLAGS=0`` or
``configure(xla_small_loops=False)``: neither (XLA's defaults everywhere).

Where the threshold is not raised (a user's ``jax.jit`` program): the SO(3) kernel's Newton
iterations of an unbatched step are unrolled (:func:`geomjax.integrators.newton.unroll_scalar_iterations`):
a step then has no loop inside, and a loop of steps that saves nothing in between (the inner
loop of ``simulate(..., save_every > 1)``) meets XLA's default threshold and is one kernel.
A loop that saves every step does not: XLA's estimate of one iteration of the free body's
LGVI step is ~940 bytes (measured by the largest extra output that still fits: 4 doubles), and
the saved state adds ~200.  Tried without success (free body, 1e5 steps, ``save_every=1``):
grouping the saved steps in an inner loop of ~100 that writes one packed block (the same
dispatches per step, times within noise), ``lax.scan(..., unroll=4 or 16)`` (5–8× slower),
steps reading and writing their state in a preallocated block (not under the threshold),
and a select chain on ``iota`` instead of constant masks in the carry's stack (more bytes).
The measured cost of the default, case by case, is in the documentation's Architecture page
(*Process settings*), from ``benchmarks/bench_import_order.py``.

Results with and without the setting agree to round-off, not bitwise (LLVM compiles one kernel
instead of several: 5e-15 after 300 steps of the ball on a turntable).  (Figures with and
without it: the documentation's architecture page, "Measured design choices".)

Why not unlimited: a loop whose iterations touch more memory than the caches hold gains
nothing from one kernel and loses the runtime's parallel dispatch (batch 16384: sleigh 56 → 76
ns with an unlimited threshold, 65 with 16 MiB; ball 301 → 366 / 302).

When the process-wide flag applies: only if it is in ``XLA_FLAGS`` before JAX creates its CPU
backend (the first computation of the process).  XLA parses its flags once per process:
neither a later ``XLA_FLAGS`` nor re-creating the backends (``jax.extend.backend.clear_backends()``) nor a
per-``jit`` ``compiler_options`` (which rejects this map-valued option) applies it afterwards;
the per-program route below adds it to the serialized compile options instead.  So a
process-wide opt-in that comes after JAX's first computation changes nothing and warns
(:data:`LATE_IMPORT_WARNING`, attributed to the user's line) with the fix.  The option belongs
to the CPU backend (not tried on an accelerator).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import sys

__all__ = [
    "LATE_IMPORT_WARNING",
    "LOOP_WARNING",
    "PROGRAM_OPTION",
    "SMALL_LOOP_BYTES",
    "XLA_FLAG",
    "compiled_loops",
    "configure_xla_flags",
    "enable_small_loops",
    "no_library_fusion_options",
    "opted_in",
    "program_small_loops",
    "small_loop_options",
    "small_loops_in_effect",
    "small_loops_traced",
    "tracing_small_loops",
    "warn_loop_without_setting",
]

#: The threshold geomjax sets (bytes touched by one iteration of a loop's body).
SMALL_LOOP_BYTES = 1 << 24

#: The ``XLA_FLAGS`` entry (the option is a backend option, passed through
#: ``xla_backend_extra_options``; a per-``jit`` ``compiler_options`` cannot set it).
XLA_FLAG = f"--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold={SMALL_LOOP_BYTES}"


#: Warned when the setting is asked for (``configure(xla_small_loops=True)``,
#: ``GEOMJAX_XLA_FLAGS=1``) after JAX's backend started (it cannot apply then).
LATE_IMPORT_WARNING = (
    "XLA:CPU's small-loop setting (geomjax.configure(xla_small_loops=True) or "
    "GEOMJAX_XLA_FLAGS=1) was asked for after JAX's first computation, so it cannot apply in "
    "this process: XLA reads XLA_FLAGS once, when its backend starts. Fix: import geomjax and "
    "call geomjax.configure(xla_small_loops=True) before computing anything with JAX (e.g. "
    "first in the notebook), or start Python with XLA_FLAGS=" + XLA_FLAG + ". Without it, "
    "geomjax's own programs and those of geomjax.jit still get the setting (per program); your "
    "own jax.jit programs run with XLA's defaults (results agree to round-off; loops that save "
    "every step are slower at small batch sizes): wrap them in geomjax.jit."
)

#: Warned once per process when one of geomjax's time loops is traced into a program that will
#: not get the setting and is not expected to be one kernel with XLA's defaults
#: (:func:`warn_loop_without_setting`).
LOOP_WARNING = (
    "geomjax: a time loop (simulate, or a gradient through it) is traced into a program compiled "
    "with XLA:CPU's defaults (jax.jit, or a transformation such as jax.vmap called outside "
    "geomjax.jit). XLA:CPU compiles a loop into one kernel only when one iteration touches "
    "less than 1 kB by its estimate; a loop that saves every step in float64, a vmapped loop "
    "and the loops of a gradient touch more, so each fused kernel of a step is dispatched on "
    "every step: measured 5-8x slower at batch 1, ~20x for a gradient, 1.3-3x at batch 1024 "
    "(2-core CPU); results agree to round-off. Compile with geomjax.jit instead of jax.jit (the same "
    "arguments), or opt in for the whole process with geomjax.configure(xla_small_loops=True) "
    "before JAX's first computation. Warned once per process."
)

_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")


def _backend_started() -> bool:
    """Whether JAX has created its backends (after that, ``XLA_FLAGS`` is not read again)."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except Exception:  # a JAX without this private helper: assume the setting applies
        return False


def configure_xla_flags(environ=None) -> bool:
    """Add :data:`XLA_FLAG` to ``XLA_FLAGS`` of ``environ`` (default ``os.environ``); returns
    whether it did.

    Leaves ``XLA_FLAGS`` alone when it already sets ``xla_backend_extra_options`` or when
    ``GEOMJAX_XLA_FLAGS=0``.  Takes effect only before JAX's CPU backend exists.  Called only
    on request (:func:`enable_small_loops`), never by ``import geomjax`` alone."""
    env = os.environ if environ is None else environ
    if env.get("GEOMJAX_XLA_FLAGS", "").strip().lower() in _OFF:
        return False
    flags = env.get("XLA_FLAGS", "")
    if "xla_backend_extra_options" in flags:
        return False
    env["XLA_FLAGS"] = f"{flags} {XLA_FLAG}".strip()
    return True


def _threshold_in(flags: str) -> bool:
    """Whether ``flags`` raise the small-loop threshold (any value above XLA's default)."""
    for word in flags.replace(",", " ").split():
        key, _, value = word.rpartition("=")
        if key.endswith("xla_cpu_small_while_loop_byte_threshold"):
            try:
                return int(value) > 1024
            except ValueError:
                return False
    return False


def small_loops_in_effect() -> bool:
    """Whether this process's XLA:CPU runs with the raised small-loop threshold (as far as can be
    told: the setting was in ``XLA_FLAGS`` at ``import geomjax`` and the backend had not started
    before it was added, or :func:`enable_small_loops` added it before the backend started).
    The SO(3) kernel's Newton iterations read it when a program is traced
    (:func:`geomjax.integrators._so3_soa.cayley_solve_scalar`): without the setting, a rolled
    loop is a loop of separately dispatched kernels, so they are unrolled."""
    return _IN_EFFECT


def enable_small_loops() -> bool:
    """Opt in: add :data:`XLA_FLAG` to ``os.environ["XLA_FLAGS"]`` (:func:`configure_xla_flags`)
    and return whether the setting is in effect in this process.  After JAX's first computation
    it cannot apply: warns (:data:`LATE_IMPORT_WARNING`) and returns ``False`` (the flag is
    still added, for child processes)."""
    global _IN_EFFECT
    if _IN_EFFECT:
        return True
    started = _backend_started()
    added = configure_xla_flags()
    if started:
        from .warn import warn

        warn(LATE_IMPORT_WARNING, RuntimeWarning)
        return False
    _IN_EFFECT = added or _threshold_in(os.environ.get("XLA_FLAGS", ""))
    return _IN_EFFECT


def opted_in(environ=None) -> bool:
    """Whether ``GEOMJAX_XLA_FLAGS`` asks for the setting (``1``/``true``/``yes``/``on``)."""
    env = os.environ if environ is None else environ
    return env.get("GEOMJAX_XLA_FLAGS", "").strip().lower() in _ON


# a threshold the user put in XLA_FLAGS before the process started (or before JAX's first
# computation: assumed) is in effect; geomjax itself changes nothing unless asked to
_IN_EFFECT = _threshold_in(os.environ.get("XLA_FLAGS", ""))

# the opt-in through the environment, read at ``import geomjax`` (this module is imported first)
if opted_in():
    enable_small_loops()


# ---------------------------------------------------------------------------------------------
# Per program: the same threshold in the compile options of one top-level program
# ---------------------------------------------------------------------------------------------
#
# XLA reads the threshold from the ``DebugOptions`` a program is compiled with; ``XLA_FLAGS``
# only fills their process-wide defaults.  JAX's ``compiler_options`` cannot set a map-valued
# option (it rejects ``xla_backend_extra_options``), so the entry is added to the serialized
# ``CompileOptionsProto`` of the programs that ask for it: those compiled with
# ``compiler_options={PROGRAM_OPTION: True}`` (geomjax's own top-level programs, and
# :func:`geomjax.jit`).  A wrapper around JAX's ``get_compile_options`` does this; it is
# installed at the first such request (never at import) and passes every other program through
# unchanged.  Measured (2-core x86-64 CPU, free body, LGVI, 1e5 steps saved every step, fresh
# processes): 49.8 ms with XLA's defaults, 7.9 ms with the per-program setting, 5.8 ms with
# ``XLA_FLAGS``.

#: The key of ``compiler_options`` that asks for the raised threshold in one program (read and
#: removed by geomjax's wrapper of JAX's compile options; XLA never sees it).
PROGRAM_OPTION = "geomjax_xla_small_loops"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return _varint((number << 3) | 2) + _varint(len(payload)) + payload


_THRESHOLD_KEY = b"xla_cpu_small_while_loop_byte_threshold"
# CompileOptionsProto.executable_build_options (3) -> ExecutableBuildOptionsProto.debug_options
# (3) -> DebugOptions.xla_backend_extra_options (500, map<string, string>): appended, it merges
# into the serialized options (protobuf merges repeated occurrences of a message field)
_EXTRA_OPTIONS = _field(
    3, _field(3, _field(500, _field(1, _THRESHOLD_KEY) + _field(2, str(SMALL_LOOP_BYTES).encode())))
)

_WRAPPER_STATE = {"installed": None}  # None: not tried; True / False: whether it works
_TRACING = contextvars.ContextVar("geomjax_small_loops_traced", default=False)


def _with_threshold(options):
    """``options`` (a ``CompileOptions``) with the threshold added, unless they set one already
    (``XLA_FLAGS``: the user's value wins)."""
    serialized = options.SerializeAsString()
    if _THRESHOLD_KEY in serialized:
        return options
    return type(options).ParseFromString(serialized + _EXTRA_OPTIONS)


def _wrap(get_compile_options):
    @functools.wraps(get_compile_options)
    def get_compile_options_with_small_loops(*args, **kwargs):
        overrides = kwargs.get("env_options_overrides")
        if not overrides or PROGRAM_OPTION not in overrides:
            return get_compile_options(*args, **kwargs)
        overrides = dict(overrides)
        wanted = overrides.pop(PROGRAM_OPTION)
        kwargs["env_options_overrides"] = overrides
        options = get_compile_options(*args, **kwargs)
        backend = kwargs.get("backend")
        on_cpu = backend is None or getattr(backend, "platform", "cpu") == "cpu"
        if wanted in (True, 1, "1", "true", "True") and on_cpu:
            options = _with_threshold(options)
        return options

    get_compile_options_with_small_loops._geomjax_wrapper = True
    return get_compile_options_with_small_loops


def _install() -> bool:
    """Install the wrapper of JAX's ``get_compile_options`` once; whether it works here (JAX's
    internals as expected, and the added entry survives a round trip)."""
    if _WRAPPER_STATE["installed"] is None:
        try:
            from jax._src import compiler
            from jax._src.lib import xla_client

            probe = _with_threshold(xla_client.CompileOptions())
            ok = _THRESHOLD_KEY in probe.SerializeAsString()
            current = compiler.get_compile_options
            if ok and not getattr(current, "_geomjax_wrapper", False):
                compiler.get_compile_options = _wrap(current)
        except Exception:  # JAX's internals moved: programs compile with XLA's defaults
            ok = False
        _WRAPPER_STATE["installed"] = ok
    return _WRAPPER_STATE["installed"]


def _per_program_wanted() -> bool:
    """Not switched off (``GEOMJAX_XLA_FLAGS=0`` or ``configure(xla_small_loops=False)``) and not
    already in effect process-wide (then nothing needs adding)."""
    return _PER_PROGRAM["on"] and not _IN_EFFECT


_PER_PROGRAM = {"on": os.environ.get("GEOMJAX_XLA_FLAGS", "").strip().lower() not in _OFF}


def set_per_program(on: bool) -> None:
    """Switch the per-program setting on or off for this process (``configure``)."""
    _PER_PROGRAM["on"] = bool(on)


def small_loop_options() -> dict:
    """``compiler_options`` that compile one top-level program with the raised threshold:
    ``{PROGRAM_OPTION: True}``, or ``{}`` where it is switched off, already in effect for the
    whole process, or cannot be applied with this JAX (then the program compiles with XLA's
    defaults: the same results to round-off, slower loops)."""
    if not _per_program_wanted() or not _install():
        return {}
    return {PROGRAM_OPTION: True}


@contextlib.contextmanager
def program_small_loops(on: bool = True):
    """While tracing a program that will be compiled with :func:`small_loop_options`: code that
    chooses a loop's form by the setting (:func:`small_loops_traced`) sees it in effect."""
    token = _TRACING.set(bool(on))
    try:
        yield
    finally:
        _TRACING.reset(token)


def tracing_small_loops() -> bool:
    """Whether the trace in progress is within :func:`program_small_loops` (a program compiled
    with the per-program setting)."""
    return _TRACING.get()


def small_loops_traced() -> bool:
    """Whether the program being traced now will run with the raised threshold: process-wide
    (:func:`small_loops_in_effect`) or per program (:func:`program_small_loops`)."""
    return _IN_EFFECT or _TRACING.get()


# ---------------------------------------------------------------------------------------------
# Per program: XLA:CPU's own kernels for small products instead of library fusions
# ---------------------------------------------------------------------------------------------
#
# XLA:CPU hands dots, and elementwise and reduction groups around them, to a kernel library
# ("YNN fusions").  In a solver's iteration these are products of ~6×9 matrices and short vectors:
# each library call is a kernel of its own inside a loop that is otherwise one kernel, and costs
# more than its arithmetic.  Without them (``xla_cpu_experimental_ynn_fusion_type`` empty) XLA
# emits the products into the loop's kernel: faster iterations, longer compilation.  For large
# batched products the library is faster (figures for both: the architecture page, "Measured
# design choices"), so this is not a process setting: only programs whose
# products are small and run many times ask for it (model predictive control, and
# ``solve_ocp(..., fast_iterations=True)``).

#: The compile option, and the value that switches the library fusions off.
NO_LIBRARY_FUSIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}

_LIBRARY_STATE = {"known": None}  # None: not probed; True / False: this XLA knows the option


def no_library_fusion_options() -> dict:
    """``compiler_options`` for a program of small products run many times
    (:data:`NO_LIBRARY_FUSIONS`), or ``{}`` where geomjax's per-program settings are switched off
    (``configure(xla_small_loops=False)``), the backend is not a CPU, or this XLA does not know
    the option (probed once, by compiling a one-operation program)."""
    if not _PER_PROGRAM["on"]:
        return {}
    if _LIBRARY_STATE["known"] is None:
        try:
            import jax
            import jax.numpy as jnp

            known = jax.default_backend() == "cpu"
            if known:
                probe = jax.jit(lambda x: x + 1).lower(jnp.zeros((), jnp.float32))
                probe.compile(compiler_options=dict(NO_LIBRARY_FUSIONS))
        except Exception:  # an XLA without the option: the programs keep its defaults
            known = False
        _LIBRARY_STATE["known"] = known
    return dict(NO_LIBRARY_FUSIONS) if _LIBRARY_STATE["known"] else {}


# ---------------------------------------------------------------------------------------------
# Which loops of a compiled program are one kernel
# ---------------------------------------------------------------------------------------------

_SMALL_CALL = 'frontend_attributes={xla_cpu_small_call="true"}'


def compiled_loops(text: str) -> list[tuple[str, bool]]:
    """``[(op_name, one_kernel), ...]``: each ``while`` of a compiled XLA:CPU program (the text
    of ``jax.jit(f).lower(...).compile().as_text()``), with the name JAX gave the operation and
    whether XLA compiled it into one kernel.

    XLA:CPU's small-loop pass moves such a loop alone into a computation of its own and calls
    it with the attribute ``xla_cpu_small_call="true"``: a loop is one kernel when the
    computation that holds it is called so, or is called (as a loop body, a fusion, ...) from
    one that is."""
    holder, loops, small, callers = None, [], set(), {}
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.rstrip().endswith("{"):
            words = line.split()
            holder = (words[1] if words[0] == "ENTRY" else words[0]).lstrip("%")
            continue
        if holder is None:
            continue
        for key in ("to_apply=", "body=", "condition=", "calls="):
            for part in line.split(key)[1:]:
                callee = part.split(",")[0].split()[0].lstrip("%")
                callers.setdefault(callee, set()).add(holder)
                if key == "to_apply=" and _SMALL_CALL in line:
                    small.add(callee)
        if " while(" in line:
            op = line.split('op_name="', 1)[1].split('"', 1)[0] if 'op_name="' in line else ""
            loops.append((op, holder))

    def in_kernel(comp, seen=()):
        if comp in small:
            return True
        return any(in_kernel(c, (*seen, comp)) for c in callers.get(comp, ()) if c not in seen)

    return [(op, in_kernel(comp)) for op, comp in loops]


_LOOP_WARNED = {"done": False}


def warn_loop_without_setting(*, one_kernel_anyway: bool = False) -> None:
    """Called where one of geomjax's time loops is traced into the caller's program (not one of
    geomjax's own top-level programs): warns once per process (:data:`LOOP_WARNING`, naming
    :func:`geomjax.jit`) when that program will not get the raised threshold although
    geomjax's per-program setting would give it one (not switched off, not already in effect
    for the whole process, applicable with this JAX), on the CPU backend, unless the caller
    says the loop is one kernel with XLA's defaults anyway (``one_kernel_anyway``: e.g. an
    unbatched forward loop over the steps of a block, which carries the state alone)."""
    if _LOOP_WARNED["done"] or one_kernel_anyway or small_loops_traced():
        return
    if not _per_program_wanted() or _WRAPPER_STATE["installed"] is False:
        return
    try:
        import jax

        if jax.default_backend() != "cpu":
            return
    except Exception:  # no backend to ask: no warning
        return
    _LOOP_WARNED["done"] = True
    from .warn import warn

    warn(LOOP_WARNING, RuntimeWarning)
