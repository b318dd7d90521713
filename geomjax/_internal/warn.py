"""Warnings that point at the user's line.

A warning raised while an ``equinox.Module`` is built (``RigidBody(...)``) sits under equinox's
``__init__`` machinery, and one raised under a transformation under jax's: a fixed
``stacklevel`` points into those libraries.  :func:`warn` counts the frames of geomjax, equinox,
jax and the standard library's class machinery above it and attributes the warning to the first
frame outside them, i.e. the caller's line."""

from __future__ import annotations

import os
import sys
import warnings

import equinox
import jax

_INTERNAL = tuple(
    os.path.dirname(os.path.abspath(m.__file__)) + os.sep
    for m in (sys.modules[__name__.partition(".")[0]], equinox, jax)
)


def _internal(filename: str) -> bool:
    return filename.startswith("<frozen ") or os.path.abspath(filename).startswith(_INTERNAL)


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn(message, category)`` attributed to the first frame outside geomjax,
    equinox and jax (the user's call)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and _internal(frame.f_code.co_filename):
        frame = frame.f_back
        # warnings.warn does not count importlib's frames (an import-time warning)
        if frame is not None and not _importlib(frame.f_code.co_filename):
            level += 1
    warnings.warn(message, category, stacklevel=level + 1 if frame is not None else 2)


def _importlib(filename: str) -> bool:
    return "importlib" in filename and "_bootstrap" in filename


def deprecated(old: str, new: str) -> None:
    """The one form of a deprecation: ``"{old} is deprecated: use {new}"``, a
    ``DeprecationWarning`` at the user's line.  The deprecated names are listed in the
    changelog's table of deprecated names (a test exercises each row)."""
    warn(f"{old} is deprecated: use {new}", DeprecationWarning)


def renamed(value, old_value, where: str, name: str, old_name: str, default=None):
    """The value of argument ``name``, or of its deprecated former name ``old_name`` (with a
    ``DeprecationWarning``); both given (``name`` not at its ``default``) is an error."""
    if old_value is None:
        return value
    if value is not default and value != default:
        raise ValueError(f"{where}: pass argument '{name}' only (its former name '{old_name}' too)")
    deprecated(f"{where}: argument '{old_name}'", f"'{name}'")
    return old_value


def renamed_attribute(owner: str, old: str, new: str) -> property:
    """A read-only attribute ``old`` of class ``owner``: the value of ``new``, with a
    ``DeprecationWarning`` (``"{owner}.{old} is deprecated: use {owner}.{new}"``)."""

    def get(self):
        deprecated(f"{owner}.{old}", f"{owner}.{new}")
        return getattr(self, new)

    return property(get, doc=f"Deprecated alias of :attr:`{new}`.")
