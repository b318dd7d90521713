"""Counting JAX's compilation events in tests (``jax.monitoring``): how many programs a call
traced or compiled."""

import jax

TRACE = "/jax/core/compile/jaxpr_trace_duration"
COMPILE = "/jax/core/compile/backend_compile_duration"


def count_events(fn, event=COMPILE):
    """``(out, n)``: ``fn()``'s result, ready, and how many times it emitted ``event``."""
    events = []

    def listener(name, duration, **kwargs):
        if name == event:
            events.append(duration)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        out = jax.block_until_ready(fn())
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    return out, len(events)
