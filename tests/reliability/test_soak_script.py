"""``make soak`` is not run by the suite (minutes); its script must stay importable against the
current API, and its pass/fail rule must treat NaN as a failure."""

import importlib
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_soak_imports_and_rows(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    soak = importlib.import_module("soak")
    assert callable(soak.main)
    rows = []
    assert soak._row("c", "q", 1.0, 2.0, rows) and rows[-1]["ok"] == "ok"
    assert not soak._row("c", "q", float("nan"), 2.0, rows) and rows[-1]["ok"] == "FAIL"
    assert not soak._row("c", "q", 3.0, 2.0, rows)
