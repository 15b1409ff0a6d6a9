"""What each candidate in tests/verify/candidates/ must get: read from the test suite's own tables.

The CPU tests pin every candidate's status in module-level tables of tests/verify/test_*.py: CORRECT
(target, file) for kernels that must pass, and CASES (file, status, reason fragment[, target]) for the
ones that must fail. The GPU check reuses those tables rather than a copy of them, so a new candidate
listed in a test is checked on the GPU too. The target is the table's, else the entry function the file
defines (a top-level function named after a target), else rms_norm (the adversarial suite's default).
A candidate that no table lists is reported as not run.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import os
import sys
from pathlib import Path

from autotune.targets import NAMES
from autotune.verify.verdict import Status

CANDIDATES = Path("tests/verify/candidates")
TABLES = ("CORRECT", "CASES")


@dataclasses.dataclass(frozen=True)
class Expectation:
    target: str
    path: str  # relative to the checkout
    expected: str | None  # the status on the CPU (unmeasured for a correct kernel); None: not listed

    @property
    def correct(self) -> bool:
        return self.expected == Status.UNMEASURED

    def matches(self, status: str, on_gpu: bool) -> bool:
        """On the CPU, the same status; on a GPU a correct kernel is timed (accepted or slower) instead."""
        if on_gpu and self.correct:
            return Status.parse(status) in Status.timed_set()
        return status == self.expected


def expectations(root: Path) -> list[Expectation]:
    """Each target's own example kernel, then every candidate file, with the status the test suite expects of it
    (first table entry wins): `--max-candidates N` keeps the examples, the kernels a GPU run times first."""
    listed: dict[str, tuple[str | None, str | None]] = {}
    for test in sorted((root / "tests" / "verify").glob("test_*.py")):
        for name, expected, target in _table_rows(test):
            listed.setdefault(name, (target, expected))
    found = []
    for path in sorted((root / CANDIDATES).glob("*.py")):
        named, status = listed.get(path.name, (None, None))
        found.append(Expectation(named or entry_target(path), str(CANDIDATES / path.name), status))
    return _examples(root) + found


def _examples(root: Path) -> list[Expectation]:
    """Each target's own correct example kernel (Target.example, autotune/targets/examples/)."""
    from autotune.targets import all_targets

    found = []
    for t in all_targets():
        if t.example_path is not None:
            path = t.example_path.resolve()
            shown = path.relative_to(root.resolve()) if path.is_relative_to(root.resolve()) else path
            found.append(Expectation(t.name, str(shown), "unmeasured"))
    return found


def entry_target(path: Path) -> str:
    try:
        tree = ast.parse(path.read_text())
    except SyntaxError:
        return "rms_norm"
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in NAMES]
    return names[0] if names else "rms_norm"


def _table_rows(test: Path) -> list[tuple[str, str, str | None]]:
    """(file, expected status, target or None) from a test module's tables."""
    module = _import(test)
    rows = []
    for table in TABLES:
        for entry in getattr(module, table, None) or ():
            entry = tuple(entry) if isinstance(entry, (tuple, list)) else (entry,)
            files = [str(x) for x in entry if isinstance(x, (str, os.PathLike)) and str(x).endswith(".py")]
            if not files:
                continue
            statuses = [getattr(x, "value", None) for x in entry if type(x).__name__ == "Status"]
            targets = [x for x in entry if isinstance(x, str) and x in NAMES]
            expected = statuses[0] if statuses else ("unmeasured" if table == "CORRECT" else None)
            if expected:
                rows.append((Path(files[0]).name, expected, targets[0] if targets else None))
    return rows


def _import(test: Path):
    spec = importlib.util.spec_from_file_location(f"selfcheck_table_{test.stem}", test)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except Exception:  # noqa: BLE001  (a test module that needs what this machine lacks: its tables are not read)
        return None
    return module
