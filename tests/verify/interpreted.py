"""Probe scripts run under the Triton interpreter in a fresh process (TRITON_INTERPRET must be set before Triton
is imported, so a probe cannot share the test process)."""

import os
import subprocess
import sys


def last_line(probe: str, timeout: int = 300) -> str:
    """Run the probe's source with TRITON_INTERPRET=1; the last line it prints (it must exit 0)."""
    out = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "TRITON_INTERPRET": "1"},
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]
