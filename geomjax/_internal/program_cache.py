"""The in-process tables of programs kept per signature: one class, and every table in one place.

Several parts of the package keep what they built for an argument signature (a function, the
shapes, dtypes and static parts of its arguments) so that a later call with the same signature
skips the work: the eager tier's host-evaluated jaxprs and quick-compile variants
(:mod:`.eager`), the programs compiled ahead of time and the checks that passed
(:mod:`.aot`), the scalar programs (:mod:`.scalarize`), the dependence of a method on its
arguments (:mod:`.dependence`).  Each is a :class:`ProgramCache`; :func:`clear_all` empties
every one of them (tests: the next call builds its program again).

JAX's persistent compilation cache, on disk and across processes, is another thing
(:mod:`.compile_cache`); so are JAX's own in-process caches of traces and executables.
"""

from __future__ import annotations

import weakref

__all__ = ["ProgramCache", "clear_all", "tables"]

_MISSING = object()
_TABLES: weakref.WeakSet = weakref.WeakSet()

#: what a full table drops to make room for a new key: its oldest entry, its least recently
#: read entry, or all of them
EVICTIONS = ("oldest", "lru", "all")


class ProgramCache:
    """A table keyed by signature (any hashable key), with an optional size bound.

    ``maxsize``: at most this many entries; a new key in a full table first drops the oldest
    entry (``evict="oldest"``), the least recently read one (``"lru"``: :meth:`get` marks a key
    as read, as :func:`functools.lru_cache` does) or every entry (``"all"``).  An unhashable key
    raises ``TypeError``, as a dict's does.  Every table is registered (weakly) for
    :func:`clear_all`."""

    __slots__ = ("__weakref__", "_table", "evict", "maxsize", "name")

    def __init__(self, name: str, *, maxsize: int | None = None, evict: str = "oldest"):
        if evict not in EVICTIONS:
            raise ValueError(f"argument 'evict' must be one of {EVICTIONS}, got {evict!r}")
        if maxsize is not None and maxsize < 1:
            raise ValueError(f"argument 'maxsize' must be at least 1 or None, got {maxsize!r}")
        self.name = name
        self.maxsize = maxsize
        self.evict = evict
        self._table: dict = {}
        _TABLES.add(self)

    def get(self, key, default=None):
        """The value kept for ``key``, else ``default``."""
        table = self._table
        if self.evict != "lru":
            return table.get(key, default)
        value = table.pop(key, _MISSING)
        if value is _MISSING:
            return default
        table[key] = value  # the most recently read
        return value

    def put(self, key, value):
        """Keep ``value`` for ``key`` (making room first in a full table); returns ``value``."""
        table = self._table
        if self.maxsize is not None and len(table) >= self.maxsize and key not in table:
            if self.evict == "all":
                table.clear()
            else:
                table.pop(next(iter(table)))
        table[key] = value
        return value

    def setdefault(self, key, value):
        """The value kept for ``key``; ``value``, kept, where there is none."""
        found = self.get(key, _MISSING)
        return self.put(key, value) if found is _MISSING else found

    def clear(self) -> None:
        self._table.clear()

    def __contains__(self, key) -> bool:
        return key in self._table

    def __len__(self) -> int:
        return len(self._table)

    def __repr__(self) -> str:
        bound = "" if self.maxsize is None else f", maxsize={self.maxsize}, evict={self.evict!r}"
        return f"ProgramCache({self.name!r}, {len(self)} entries{bound})"


def tables() -> list[ProgramCache]:
    """Every table that exists now."""
    return list(_TABLES)


def clear_all() -> None:
    """Empty every table (:func:`tables`): the next call of each signature builds its program
    again.  JAX's own caches are left alone (``jax.clear_caches``)."""
    for table in tables():
        table.clear()
