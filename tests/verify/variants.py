"""Kernels made at test time from a correct example by small changes, not checked in as near-copies of it."""

from __future__ import annotations

from pathlib import Path

from autotune.targets import get


def example_variant(tmp_path: Path, target: str, old: str, new: str, *more: tuple[str, str]) -> Path:
    """A kernel made from the target's correct example by a change, and `more` (old, new) changes (so it cannot
    drift from it unseen: each change must still apply)."""
    return file_variant(tmp_path, get(target).example_path, (old, new), *more, name=f"{target}_variant.py")


def file_variant(tmp_path: Path, path: Path, *changes: tuple[str, str], name: str | None = None) -> Path:
    """The kernel file at `path` with each (old, new) change made; each `old` must occur in it exactly once."""
    source = path.read_text()
    for before, after in changes:
        assert source.count(before) == 1, f"{path.name} no longer has {before!r}"
        source = source.replace(before, after)
    made = tmp_path / (name or path.name)
    made.write_text(source)
    return made
