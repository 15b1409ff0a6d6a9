"""Work several tests look at, done once per test session whichever pytest-xdist worker asks first (a module-scoped
fixture runs once per worker: twice under `pytest -n 2`)."""

from __future__ import annotations

import fcntl
import json
from collections.abc import Callable
from pathlib import Path


def once(tmp_path_factory, worker_id: str, name: str, make: Callable[[Path], dict]) -> dict:
    """`make(folder)` run once per session in a fresh folder; its JSON-able result, read back by every caller. A
    `make` that raises leaves no result: the next caller runs it again (and sees the same failure)."""
    base = tmp_path_factory.getbasetemp()
    root = base if worker_id == "master" else base.parent  # the session's folder, shared by its workers
    done, folder = root / f"{name}.json", root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_file():
            folder.mkdir(exist_ok=True)
            done.write_text(json.dumps(make(folder)))
    return json.loads(done.read_text())
