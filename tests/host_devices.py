"""Running a test script in a process with several host devices (shared by the sharding
tests of the package's folders; ``tests/`` is on ``sys.path`` through its conftest)."""


def run_on_host_devices(script: str, devices: int = 4, timeout: int = 300) -> dict:
    """Run ``script`` in a fresh Python process whose CPU backend has ``devices`` host devices
    (the device count is fixed when JAX starts, hence the process) and return the JSON it
    prints on a line starting with ``RESULT``."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

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
