"""Proposal records: one JSON file per proposal (and its evidence), kept inside the repository's git dir.

They live in `<git common dir>/autotune/proposals/` so that they survive branch deletion (a rejected
proposal keeps its reason), are shared by every worktree of the repository, and are never committed to
the base branch. Writes are atomic (a temporary file renamed over the old one), so a crash leaves either
the old record or the new one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.errors import UserError

if TYPE_CHECKING:
    from autotune.publish.types import Proposal


def store_dir(repo, create: bool = True) -> Path:
    """The folder holding the proposal records of this repository (created on first write)."""
    path = Path(repo.common_dir) / "autotune" / "proposals"
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save(repo, proposal: Proposal) -> None:
    _write_atomic(store_dir(repo) / f"{proposal.id}.json", json.dumps(dataclasses.asdict(proposal), indent=2) + "\n")


def save_evidence(repo, proposal_id: str, markdown: str) -> Path:
    path = store_dir(repo) / f"{proposal_id}.md"
    _write_atomic(path, markdown)
    return path


def load(repo, proposal_id: str) -> Proposal | None:
    from autotune.publish.types import Proposal

    path = store_dir(repo, create=False) / f"{proposal_id}.json"
    if not path.is_file():
        return None
    fields = {f.name for f in dataclasses.fields(Proposal)}
    return Proposal(**{k: v for k, v in json.loads(path.read_text()).items() if k in fields})


def get(repo, proposal_id: str) -> Proposal:
    found = load(repo, proposal_id)
    if found is None:
        known = [p.id for p in all_records(repo)]
        hint = f"known: {', '.join(known[-5:])}" if known else "there are no proposals in this repository yet"
        raise UserError(f"no proposal '{proposal_id}' in {repo.working_dir} "
                        f"({hint}; `autotune review list` shows them)")
    return found


def all_records(repo) -> list[Proposal]:
    """Every proposal of this repository, oldest first."""
    records = [load(repo, p.stem) for p in store_dir(repo, create=False).glob("*.json")]
    return sorted((r for r in records if r is not None), key=lambda r: (r.created_at, r.id))

