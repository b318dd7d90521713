"""Internal plumbing shared by the package; not part of the public interface.

- :mod:`.jaxpr_eval` — the one walk of a jaxpr, parameterised by a table of rules per
  primitive (the evaluators below are such tables); the liveness pass (dead-code elimination) and
  the known/unknown split of a jaxpr's equations.
- :mod:`.program_cache` — the one class of in-process tables of programs kept per signature
  (size bounds, evictions), and ``clear_all`` of every table.
- :mod:`.tracing` — whether values are being traced (the package's tracing predicates).
- :mod:`.scalarize` — evaluate a small program scalar by scalar (a few fused kernels).
- :mod:`.host_eval`, :mod:`.eager` — the eager tier: host evaluation of first calls, then quick
  compilation without XLA's backend optimizations.
- :mod:`.aot` — checks remembered per signature, programs compiled ahead of time per
  signature, bound methods that do not walk a module's leaves (control loops' ticks).
- :mod:`.dependence` — which inputs a function's jaxpr depends on (by the liveness pass).
- :mod:`.scalar_entries` — small leaves as scalar entries, and the walk reading them.
- :mod:`.xla_flags` — XLA:CPU's small-loop threshold in ``XLA_FLAGS`` (opt-in).
- :mod:`.gc_freeze` — ``gc.freeze()`` of the objects that exist (opt-in).
- :mod:`.compile_cache` — JAX's persistent (on-disk) compilation cache (opt-in).
- :mod:`.settings` — ``geomjax.configure``, the opt-in to these three.
- :mod:`.warn` — warnings attributed to the caller's line, outside the package.

Nothing here is imported at package import except what :mod:`geomjax` itself needs; importing this
package alone computes nothing.
"""
