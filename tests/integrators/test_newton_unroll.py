"""The GEOMJAX_NEWTON_UNROLL switch (lets a benchmark time the rolled and unrolled Newton loops on
one device); that both forms give the same steps is checked in test_rigid_body."""

import jax
import pytest

from geomjax.integrators import newton


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1", True), ("unrolled", True), ("0", False), ("rolled", False), ("auto", None), ("", None)],
)
def test_newton_unroll_switch(monkeypatch, value, expected):
    monkeypatch.setenv("GEOMJAX_NEWTON_UNROLL", value)
    auto = jax.default_backend() != "cpu"
    assert newton._unroll_iterations() is (auto if expected is None else expected)


def test_newton_unroll_default(monkeypatch):
    monkeypatch.delenv("GEOMJAX_NEWTON_UNROLL", raising=False)
    assert newton._unroll_iterations() is (jax.default_backend() != "cpu")
