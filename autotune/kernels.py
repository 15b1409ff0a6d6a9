"""The kernels registry: the merged kernels in `kernels/<op>/<id>/` and routing the served model to them.

A kernel is registered by being merged into the base branch (`autotune review approve`): its folder holds
`kernel.py` and `provenance.json` (run, agent, model, tokens, cost, verdict summary, environment).

    found = merged("kernels")                     # {"rms_norm": [MergedKernel, ...]}, best first
    k = best("kernels", "rms_norm")               # accepted with the highest weighted speedup, else
                                                  # the most recently merged correct one
    dispatch.use("rms_norm", load(k))             # or enable(cfg) for every target, from config

Loading imports kernel.py in this process: merged kernels have been reviewed by a human, unlike the
candidates the checker runs in a sandbox.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune import targets
from autotune.errors import UserError
from autotune.verify.verdict import Status, is_passed


@dataclasses.dataclass(frozen=True)
class MergedKernel:
    target: str
    id: str  # the short id: kernels/<target>/<id>/
    path: Path  # the kernel's folder
    provenance: dict[str, Any]
    merge_rank: int = -1  # 0 = most recently merged (git first-parent history); -1 = not in git history

    @property
    def source_path(self) -> Path:
        return self.path / "kernel.py"

    @property
    def status(self) -> str:
        return str(self.provenance.get("verdict", {}).get("status", "unknown"))

    @property
    def speedup(self) -> float | None:
        """Weighted geometric-mean speedup, only when measured on a GPU and accepted."""
        v = self.provenance.get("verdict", {})
        return v.get("speedup_geomean") if v.get("measured") and v.get("status") == Status.ACCEPTED else None


def _merge_order(kernels_dir: Path) -> dict[str, int]:
    """"<op>/<id>" -> 0 for the most recently merged kernel, 1 for the one before, ... from the git history
    of the base branch (first parent: the merge commit that brought each folder in)."""
    import git

    try:
        repo = git.Repo(kernels_dir, search_parent_directories=True)
        if repo.working_tree_dir is None:  # a bare repository: no kernels folder in it
            return {}
        rel = kernels_dir.resolve().relative_to(Path(repo.working_tree_dir).resolve())
        # -m with --first-parent lists a merge's files against the base it was merged into (any git >= 2.0)
        out = repo.git.log("--first-parent", "-m", "--format=", "--name-only", "--", str(rel) or ".")
    except (git.InvalidGitRepositoryError, git.NoSuchPathError, git.GitCommandError, ValueError, TypeError):
        return {}
    order: dict[str, int] = {}
    for line in out.splitlines():
        parts = Path(line).relative_to(rel).parts if line.strip() else ()
        if len(parts) >= 3 and parts[-1] == "kernel.py":
            order.setdefault(f"{parts[0]}/{parts[1]}", len(order))
    return order


def _read_provenance(folder: Path) -> dict[str, Any]:
    path = folder / "provenance.json"
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except ValueError:
        raise UserError(f"{path} is not valid JSON (restore it from git: `git checkout -- {path}`)") from None


def _preference(k: MergedKernel) -> tuple:
    """Sort key, best first: accepted by speedup, then the most recently merged (kernels outside git first)."""
    return (k.speedup is None, -(k.speedup or 0.0), k.merge_rank)


def merged(kernels_dir: str | os.PathLike) -> dict[str, list[MergedKernel]]:
    """Every kernel folder with a kernel.py under kernels_dir, per target, best first."""
    root = Path(kernels_dir)
    if not root.is_dir():
        return {}
    order = _merge_order(root)
    found: dict[str, list[MergedKernel]] = {}
    for kernel_py in sorted(root.glob("*/*/kernel.py")):
        folder = kernel_py.parent
        target, kid = folder.parent.name, folder.name
        if target not in targets.NAMES:
            continue
        k = MergedKernel(target, kid, folder, _read_provenance(folder), order.get(f"{target}/{kid}", -1))
        found.setdefault(target, []).append(k)
    for kernels in found.values():
        kernels.sort(key=lambda k: str(k.provenance.get("created_at", "")), reverse=True)  # ties: newest first
        kernels.sort(key=_preference)
    return found


def best(kernels_dir: str | os.PathLike, target: str) -> MergedKernel | None:
    """The kernel the served model should use for `target`, among those judged correct; None if none."""
    return next((k for k in merged(kernels_dir).get(target, []) if is_passed(k.status)), None)


def interpreter_on() -> None:
    """On a machine without a GPU, turn the Triton interpreter on for this process, before kernels are defined.

    Measured with triton 3.9: `@triton.jit` decides at decoration time whether a function is interpreted, by
    reading `triton.knobs.runtime.interpret`, which reads TRITON_INTERPRET from the live process environment
    on each access. That holds for triton's own library too: `tl.zeros`, `tl.sum`, ... are @jit functions in
    triton/language/standard.py, fixed when triton.language is first imported. So the variable must be set
    before the first `import triton` of the process (`_check_interpretable` says so when it was not), and
    triton cannot be re-imported to fix it (its C extension refuses to register its types twice).
    """
    from autotune import accel
    from autotune.accel import queries

    os.environ.update(accel.get("auto").triton_env())
    queries.answer()  # without a GPU, a launcher's device queries answered as the GPU it is judged for


def _check_interpretable(module, path: Path) -> None:
    """Refuse a CPU-only process whose triton was imported before the interpreter was on (see interpreter_on):
    its kernels would fail at launch with "Cannot call @triton.jit'd outside of the scope of a kernel"."""
    from autotune import accel

    standard = sys.modules.get("triton.language.standard")
    if accel.gpu_available() or standard is None or type(standard.zeros).__name__ == "InterpretedFunction":
        return
    if any(type(v).__name__ in ("JITFunction", "InterpretedFunction") for v in vars(module).values()):
        raise RuntimeError(f"cannot run {path} in this process: triton was imported before the Triton interpreter "
                           f"was turned on, and there is no GPU (call autotune.kernels.interpreter_on() or "
                           f"kernels.enable(cfg) before anything imports triton)")


def load(kernel: MergedKernel) -> Callable:
    """Import the kernel's file as a module of its own and return its entry function (named after the target).
    Without a GPU the kernel runs under the Triton interpreter (see `interpreter_on`)."""
    interpreter_on()
    name = f"_autotune_kernel_{kernel.target}_{kernel.id}"
    spec = importlib.util.spec_from_file_location(name, kernel.source_path)
    if spec is None or spec.loader is None:
        raise UserError(f"cannot import {kernel.source_path} (is it a Python file?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton reads the kernel's source through its module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 (whatever the kernel's module raises: a UserError naming it)
        del sys.modules[name]
        raise UserError(f"merged kernel {kernel.source_path} failed to import: {type(e).__name__}: {e} "
                        f"(run `autotune verify {kernel.target} {kernel.source_path}` to see why)") from None
    _check_interpretable(module, kernel.source_path)
    entry = getattr(module, kernel.target, None)
    if not callable(entry):
        raise UserError(f"{kernel.source_path} defines no function {kernel.target}() "
                        f"(the entry point every kernel needs)")
    return entry


def enable(cfg) -> dict[str, MergedKernel]:
    """With cfg.kernels.enable, route each target's dispatch point to its best merged kernel
    (only the targets in cfg.kernels.only when that is not empty); returns what was enabled."""
    if not cfg.kernels.enable:
        return {}
    from autotune.serve import dispatch

    root = Path(str(cfg.kernels.dir))
    if not root.is_dir():
        raise UserError(f"kernels.enable=true but kernels.dir {root.resolve()} does not exist "
                        f"(approve a proposal with `autotune review approve ID`, or set kernels.dir=PATH)")
    only = [str(t) for t in (cfg.kernels.only or [])]
    for name in only:
        targets.get(name)  # a UserError for an unknown target
    found = merged(root)
    chosen = {}
    for name in only or targets.NAMES:
        k = next((k for k in found.get(name, []) if is_passed(k.status)), None)
        if k is None and name in only:
            raise UserError(f"kernels.only names {name}, but {root} has no merged {name} kernel judged correct "
                            f"(drop it from kernels.only, or approve a {name} proposal)")
        if k is not None:
            chosen[name] = k
    loaded = {name: load(k) for name, k in chosen.items()}  # all import, or none is routed
    for name, fn in loaded.items():
        dispatch.use(name, fn)
    return chosen
