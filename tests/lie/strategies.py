"""Shared hypothesis strategies and helpers for the group tests.

Random inputs are drawn with NumPy (cheap, no compilation) from a hypothesis-chosen seed.
"""

import numpy as np
from hypothesis import strategies as st

import geomjax as gj

GROUPS = [gj.SO3, gj.SE3, gj.SO2, gj.SE2, gj.Rn(3), gj.Tn(2)]
MATRIX_GROUPS = [gj.SO3, gj.SE3, gj.SO2, gj.SE2]
BATCHES = [(), (5,), (2, 3)]


def group_id(G):
    return G.name


def seeds():
    return st.integers(min_value=0, max_value=2**30)


def rotational_dims(G):
    """Indices of the algebra coordinates that are angles (wrap at π)."""
    return {"SO3": [0, 1, 2], "SE3": [0, 1, 2], "SO2": [0], "SE2": [0]}.get(
        G.name, list(range(G.dim)) if G.name.startswith("T") else []
    )


def random_algebra(G, seed, batch, scale=1.0, max_angle=None, dtype=np.float64):
    """Random Lie algebra vectors; the rotational part's norm is kept below ``max_angle``."""
    x = scale * np.random.default_rng(seed).standard_normal((*batch, G.dim))
    rot = rotational_dims(G)
    if max_angle is not None and rot:
        if G.name.startswith("T"):
            x[..., rot] = np.clip(x[..., rot], -max_angle, max_angle)
        else:
            w = x[..., rot]
            n = np.linalg.norm(w, axis=-1, keepdims=True)
            x[..., rot] = w * np.minimum(1.0, max_angle / np.maximum(n, 1e-300))
    return x.astype(dtype)


def random_element(G, seed, batch, dtype=np.float64):
    """Group elements spread over the whole group: exp of vectors with angles up to ~π."""
    x = random_algebra(G, seed, batch, scale=2.0, max_angle=np.pi - 1e-9)
    return np.asarray(G.exp(x.astype(dtype)))
