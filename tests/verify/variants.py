"""Kernels made at test time from a correct example by small changes, not checked in as near-copies of it."""

from __future__ import annotations

from pathlib import Path

from autotune.targets import get


def example_variant(tmp_path: Path, target: str, old: str, new: str, *more: tuple[str, str]) -> Path:
    """A kernel made from the target's correct example by a change, and `more` (old, new) changes (so it cannot
    drift from it unseen: each change must still apply)."""
    source = get(target).example_path.read_text()
    for before, after in ((old, new), *more):
        assert source.count(before) == 1, f"{target}'s example no longer has {before!r}"
        source = source.replace(before, after)
    path = tmp_path / f"{target}_variant.py"
    path.write_text(source)
    return path
