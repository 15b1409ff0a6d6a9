"""The run ledger: an append-only JSON-lines file, one record per event (LLM call, candidate, verdict, ...).

Every record is written as a single line with one `write` and flushed and fsynced, so a crash loses
at most the line being written; `read` skips a torn last line instead of failing, and `frame` gives
the ledger as a pandas DataFrame for analysis. Secrets never reach it: callers pass records, and
`append` refuses any string that contains a value registered with `redact`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

_SECRETS: set[str] = set()


def redact(secret: str | None) -> None:
    """Register a secret value (an API key, a token) that must never be written to a ledger."""
    if secret and len(secret) >= 8:
        _SECRETS.add(secret)


def _check_no_secret(line: str) -> None:
    for s in _SECRETS:
        if s in line:
            raise ValueError("refusing to write a ledger record that contains a secret value")


class Ledger:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        record = {"kind": kind, "ts": dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds"), **fields}
        line = json.dumps(record, default=str, sort_keys=False) + "\n"
        _check_no_secret(line)
        with self._lock:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)  # read: the torn-line check
            try:
                if os.fstat(fd).st_size and not _ends_with_newline(fd):
                    os.write(fd, b"\n")  # a torn line from a crash: start ours on a line of its own
                os.write(fd, line.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        return record

    def read(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [r for r in read(self.path) if kind is None or r.get("kind") == kind]


def _ends_with_newline(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return size == 0 or os.pread(fd, 1, size - 1) == b"\n"


def read(path: str | os.PathLike) -> list[dict[str, Any]]:
    """All whole records of a ledger; a line torn by a crash is skipped."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            records.append(rec)
    return records


def frame(paths: str | os.PathLike | Iterable[str | os.PathLike], kind: str | None = None):
    """One or more ledgers as a pandas DataFrame (nested fields flattened with dots)."""
    import pandas as pd

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    rows = []
    for p in paths:
        for r in read(p):
            if kind is None or r.get("kind") == kind:
                rows.append({"ledger": str(p), **r})
    return pd.json_normalize(rows) if rows else pd.DataFrame()
