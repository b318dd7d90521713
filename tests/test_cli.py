"""The command line entry points."""

import subprocess
import sys

import pytest

import geomjax
from geomjax.cli import main


def test_version(capsys):
    try:
        main(["--version"])
    except SystemExit as e:
        assert e.code == 0
    assert geomjax.__version__ in capsys.readouterr().out


@pytest.mark.long
def test_demo_fast_runs_all_sections_and_writes_plots(tmp_path):
    # a subprocess, as a user would run it (fresh JAX configuration)
    proc = subprocess.run(
        [sys.executable, "-m", "geomjax", "demo", "--fast", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all checks passed" in proc.stdout
    assert list(tmp_path.glob("*.png"))
