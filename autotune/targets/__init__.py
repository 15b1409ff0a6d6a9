"""The targets: ops a kernel may replace, one module each. `get("rms_norm")` returns its Target.

A target is a module in this package that defines `TARGET = Target(...)` (see base.py and README.md,
"Adding a target"); NAMES lists them in alphabetical order, found by walking the package, so adding
a target adds no line here. Modules without a TARGET (base, space) are the package's own parts.
"""

from __future__ import annotations

import importlib
import pkgutil

from autotune.errors import UserError
from autotune.targets.base import OpClass, Target

__all__ = ["NAMES", "OpClass", "Target", "all_targets", "get"]


def _discover() -> tuple[str, ...]:
    found = []
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if module.name.startswith("_"):
            continue
        target = getattr(importlib.import_module(f"{__name__}.{module.name}"), "TARGET", None)
        if isinstance(target, Target):
            if target.name != module.name:
                raise ImportError(f"autotune/targets/{module.name}: its TARGET is named '{target.name}'; "
                                  "a target's module is named after it")
            found.append(module.name)
    return tuple(found)


NAMES = _discover()


def get(name: str) -> Target:
    if name not in NAMES:
        raise UserError(f"unknown target '{name}' (known targets: {', '.join(NAMES)})")
    return importlib.import_module(f"{__name__}.{name}").TARGET


def all_targets() -> list[Target]:
    return [get(n) for n in NAMES]
