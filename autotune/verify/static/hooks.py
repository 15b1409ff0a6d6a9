"""`@triton.jit(launch_metadata=hook)`: the profiler hooks vLLM's GEMMs name their FLOPs and bytes with.

Triton calls such a hook only while a launch hook is installed (a profiler's), which the checker never does and a
candidate cannot (triton.knobs is not listed); what it returns goes to the profiler alone. So a plain function named
only there may format strings and read the kernel's name (policy.py), and, as nothing it did would be seen, may only
read its arguments and build the dict it returns. A function read anywhere else is plain launcher code.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable

from autotune.verify.static.allowlist import HOOK_READS

_BUILTINS = frozenset(dir(builtins))


def named(tree: ast.Module, functions: set[str], is_jit: Callable[[ast.Call], bool]) -> set[str]:
    """The top-level plain functions named only as `launch_metadata=` of a @triton.jit decorator."""
    hooked = [k.value.id for d in ast.walk(tree) if isinstance(d, ast.Call) and is_jit(d)
              for k in d.keywords if k.arg == "launch_metadata" and isinstance(k.value, ast.Name)]
    loads = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    return {name for name in hooked if name in functions and loads.count(name) == hooked.count(name)}


def findings(hook: ast.FunctionDef, dotted: Callable[[ast.AST], str | None]) -> list[tuple[ast.AST, str]]:
    """Beyond the launcher rules: no call of the file's functions, of a module's or of a kernel; no method but the
    reads in HOOK_READS; no store but into a dict the hook made; no in-place operator (an attacker's hook zeroed the
    key cache it was handed)."""
    own = {t.id for s in ast.walk(hook) if isinstance(s, ast.Assign) and isinstance(s.value, ast.Dict)
           for t in s.targets if isinstance(t, ast.Name)}
    found: list[tuple[ast.AST, str]] = []
    for n in ast.walk(hook):
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Attribute) and dotted(f) is None:
                ok, what = f.attr in HOOK_READS, f"`.{f.attr}()`"
            else:
                ok, what = isinstance(f, ast.Name) and f.id in _BUILTINS, f"`{ast.unparse(f)}`"
            if not ok:
                found.append((n, f"calls {what} in the launch_metadata hook `{hook.name}`: a hook only reads its "
                                 f"arguments ({', '.join(sorted(HOOK_READS))}) and returns a new dict, as Triton runs "
                                 "it under a profiler the checker never installs"))
        elif isinstance(n, ast.AugAssign):
            found.append((n, f"changes a value in place in the launch_metadata hook `{hook.name}`"))
        elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store) and not (
                isinstance(n.value, ast.Name) and n.value.id in own):
            found.append((n, f"stores into `{ast.unparse(n.value)}` in the launch_metadata hook `{hook.name}`: only "
                             "into a dict the hook made"))
    return found
