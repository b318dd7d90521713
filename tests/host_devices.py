"""Running a test script in a process with several host devices (shared by the sharding
tests of the package's folders; ``tests/`` is on ``sys.path`` through its conftest)."""

import hashlib
import json
import os
from pathlib import Path


def run_on_host_devices(
    script: str, devices: int = 4, timeout: int = 300, share: Path | None = None
) -> dict:
    """Run ``script`` in a fresh Python process whose CPU backend has ``devices`` host devices
    (the device count is fixed when JAX starts, hence the process) and return the JSON it
    prints on a line starting with ``RESULT``.

    ``share``: a folder that all pytest-xdist workers of the session see (the ``host_devices``
    fixture of ``tests/conftest.py`` passes it).  The first worker to ask runs the script and
    leaves its result there; a worker asking for the same script later (the worksteal scheduler
    can hand a module's tests to both workers, each setting up the module's fixture) reads it
    instead of running the process again.  A script that fails leaves nothing: each asker runs
    it and fails alike."""
    if share is None:
        return _run(script, devices, timeout)
    try:
        import fcntl
    except ImportError:  # no POSIX file locks (Windows): each worker runs its own
        return _run(script, devices, timeout)
    key = hashlib.sha256(f"{devices}\0{script}".encode()).hexdigest()[:20]
    result = share / f"host-devices-{key}.json"
    with open(share / f"host-devices-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second asker waits for the first's result
        if result.exists():
            return json.loads(result.read_text())
        out = _run(script, devices, timeout)
        result.write_text(json.dumps(out))
        return out


def _run(script: str, devices: int, timeout: int) -> dict:
    import subprocess
    import sys

    env = {
        **os.environ,
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(s for s in proc.stdout.splitlines() if s.startswith("RESULT"))
    return json.loads(line[len("RESULT") :])
