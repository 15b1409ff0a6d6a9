"""What the sandbox tests look for after a run: live processes, found by their command lines."""

from pathlib import Path

from autotune.sandbox.runner import _processes


def alive_with(marker: str) -> list[int]:
    """Host pids of live processes whose command line holds `marker`."""
    found = []
    for pid, _ in _processes():
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found
