"""``make soak`` runs minutes and is not part of the suite (CI runs its reduced ``--ci`` mode
after the suite, ``.ci/run``); its script must stay importable against the current API, its
pass/fail rule must treat NaN as a failure, and its bounded-vs-drifting energy rule must tell a
bounded oscillation from a secular drift."""

import importlib
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _soak(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("soak")


def test_soak_imports_and_rows(monkeypatch):
    soak = _soak(monkeypatch)
    assert callable(soak.main)
    rows = []
    assert soak._row("c", "q", 1.0, 2.0, rows) and rows[-1]["ok"] == "ok"
    assert not soak._row("c", "q", float("nan"), 2.0, rows) and rows[-1]["ok"] == "FAIL"
    assert not soak._row("c", "q", 3.0, 2.0, rows)


def test_energy_rule_separates_bounded_from_drifting(monkeypatch):
    """A bounded error (amplitude 1e-4, 50 periods over the run) passes in both modes; an error
    growing like t (from 0 to 1e-4) fails the ratio in both (ratio 1/f = 100 or 10 against the
    bound 1/sqrt(f) = 10 or 3.16)."""
    soak = _soak(monkeypatch)
    t = np.linspace(0.0, 1.0, 10_001)
    bounded = 1.0 + 1e-4 * np.sin(2 * np.pi * 50 * t) ** 2
    drifting = 1.0 + 1e-4 * t
    for window in soak.WINDOW.values():
        rows = []
        soak._energy_rows("bounded", bounded, rows, h_omega=0.01, window=window)
        assert [r["ok"] for r in rows] == ["ok", "ok"]
        rows = []
        soak._energy_rows("drifting", drifting, rows, h_omega=0.01, window=window)
        assert [r["ok"] for r in rows] == ["ok", "FAIL"]
