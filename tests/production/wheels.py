"""Production Triton kernels, read at test time from the wheels that ship them (never copied into this repository).

A `Source` names a distribution, its pinned version and a module file inside it. `read` takes the file from the
installed distribution when its version is the pinned one (Liger-Kernel is a test dependency), else from the
wheel itself: `pip download --no-deps` of that exact version into a cache folder (`AUTOTUNE_WHEELS`, default
~/.cache/autotune/wheels), opened as the zip it is; nothing of it is installed or imported. `take` cuts the named
top-level definitions out of the module's text, verbatim (decorators included), so that a port is the
production code plus a launcher of ours that fits it to a target's interface.
"""

from __future__ import annotations

import ast
import dataclasses
import email
import importlib.metadata
import os
import subprocess
import sys
import zipfile
from pathlib import Path

CACHE = Path(os.environ.get("AUTOTUNE_WHEELS", Path.home() / ".cache" / "autotune" / "wheels"))


@dataclasses.dataclass(frozen=True)
class Source:
    dist: str  # the distribution's name on PyPI
    version: str
    path: str  # the module's path inside the wheel, e.g. liger_kernel/ops/rms_norm.py

    def __str__(self) -> str:
        return f"{self.dist}=={self.version}:{self.path}"


def _installed(source: Source) -> str | None:
    try:
        dist = importlib.metadata.distribution(source.dist)
    except importlib.metadata.PackageNotFoundError:
        return None
    if dist.version != source.version:
        return None
    return Path(str(dist.locate_file(source.path))).read_text()


def wheel(dist: str, version: str) -> Path:
    """The wheel of dist==version in the cache, downloaded (no dependencies) when absent."""
    name = dist.replace("-", "_").lower()
    found = sorted(CACHE.glob(f"{name}-{version}-*.whl"), key=str)
    if found:
        return found[0]
    CACHE.mkdir(parents=True, exist_ok=True)
    run = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
                          "-d", str(CACHE), f"{dist}=={version}"], capture_output=True, text=True, timeout=600)
    found = sorted(CACHE.glob(f"{name}-{version}-*.whl"), key=str)
    if run.returncode or not found:
        raise RuntimeError(f"could not download the wheel {dist}=={version} (the package registry is needed once; "
                           f"then it is cached in {CACHE}): {run.stderr[-800:]}")
    return found[0]


def read(source: Source) -> str:
    """The module's text from the installed distribution of that version, or from its wheel."""
    text = _installed(source)
    if text is not None:
        return text
    with zipfile.ZipFile(wheel(source.dist, source.version)) as z:
        return z.read(source.path).decode()


def licence(source: Source) -> str:
    """The licence the wheel's metadata declares (License-Expression, License, or the classifiers)."""
    try:
        meta = importlib.metadata.distribution(source.dist).metadata
        if meta["Version"] != source.version:
            raise importlib.metadata.PackageNotFoundError
    except importlib.metadata.PackageNotFoundError:
        with zipfile.ZipFile(wheel(source.dist, source.version)) as z:
            name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            meta = email.message_from_bytes(z.read(name))
    for key in ("License-Expression", "License"):
        value = (meta.get(key) or "").strip().splitlines()
        if value and len(value[0]) < 80:  # a whole licence text in the field: its first line names it
            return value[0].strip()
    classifiers = [c.split("::")[-1].strip() for c in meta.get_all("Classifier") or [] if c.startswith("License")]
    return ", ".join(classifiers) or "not declared"


def _defined(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _decorators_kept(node: ast.stmt, from_jit: bool) -> list:
    decorators = getattr(node, "decorator_list", [])
    if not from_jit:
        return decorators
    for i, d in enumerate(decorators):  # the library's own wrappers above @triton.jit (FlagGems' libentry, libtuner)
        d = d.func if isinstance(d, ast.Call) else d
        if isinstance(d, ast.Attribute) and d.attr == "jit":
            return decorators[i:]
    return decorators


def take(text: str, names: tuple[str, ...], where: str = "", from_jit: bool = False) -> str:
    """The top-level definitions `names` of a module's text, verbatim and in the module's order (with `from_jit`, a
    kernel's decorators from `@triton.jit` down); KeyError names the ones the module does not define (the wheel
    changed: the port needs a look)."""
    lines = text.splitlines()
    kept, found = [], set()
    for node in ast.parse(text).body:
        hit = [n for n in _defined(node) if n in names]
        if not hit:
            continue
        found.update(hit)
        start = min([node.lineno] + [d.lineno for d in _decorators_kept(node, from_jit)])
        kept.append("\n".join(lines[start - 1:node.end_lineno]))
    missing = [n for n in names if n not in found]
    if missing:
        raise KeyError(f"{where or 'the module'} defines no {missing}")
    return "\n\n\n".join(kept)
