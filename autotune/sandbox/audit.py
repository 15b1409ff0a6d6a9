"""Run-time defence in depth for untrusted code in a sandboxed child: an audit hook and frozen modules.

The child's own code imports everything it needs first, then, right before the untrusted code is imported:

    guard = audit.Guard(read=[workdir, *python_roots], write=[triton_cache])
    guard.arm()          # sys.addaudithook: cannot be removed for the rest of the process
    audit.freeze_modules()
    ... import and run the untrusted code ...
    with guard.trusted():  # the child's own bookkeeping (traceback formatting reads frames)
        ...

While armed, the hook (a closure: no module global, nothing in sys.modules holds its state) denies:
- `open` for writing anywhere but the `write` roots, and for reading outside the `read` roots; listing,
  creating, removing or renaming files outside them likewise;
- starting processes (`subprocess.Popen`, `os.system`, `os.exec*`, `os.posix_spawn`, `os.spawn*`,
  `os.fork`/`os.forkpty`), signalling processes (`os.kill`), sockets (`socket.*`), foreign calls
  (`ctypes.*`), `mmap` of a file (an anonymous map is memory: the checker's large storages are ones);
- reaching the caller's state through frames and the collector (`sys._getframe`, `sys._current_frames`,
  frame, traceback and generator frame attributes, `gc.get_objects`/`get_referrers`/`get_referents`),
  tracing and profiling hooks, and further audit hooks;
- importing a module that is not loaded yet, unless its top-level package is in the allow-list.
`freeze_modules()` makes every plain module loaded so far refuse to have an existing attribute replaced or
deleted (`sys.modules["__main__"].run_case = ...`, `torch.save = ...`): the code that reports on the
untrusted code cannot be swapped out through the modules that hold it. New attributes (a submodule that
is imported lazily registering itself on its package) are still allowed.

What it does not stop: code already loaded that the untrusted code calls on its behalf (which is why the
static policy and the process confinement come first), and mutation of objects it can reach (a class's
attributes, a function's globals dict): the child re-checks what matters (see the worker).
"""

from __future__ import annotations

import contextlib
import os
import sys
import types
from collections.abc import Sequence
from typing import Any

# A module that is not loaded yet may be imported only from these packages. Measured: once the worker has
# imported what Triton loads on a first launch, the correct candidates in tests/verify/candidates import
# nothing new; these are what torch, Triton or a candidate may still load lazily without harm.
ALLOWED_IMPORTS = frozenset({
    "torch", "triton", "math", "numpy", "typing", "typing_extensions", "functools", "__future__", "dataclasses",
    "enum", "operator", "itertools", "collections", "numbers", "abc", "contextlib", "copy", "warnings", "weakref",
    "sympy", "mpmath", "fractions", "decimal", "string", "textwrap", "re", "json", "hashlib", "keyword",
    "_strptime", "encodings", "unicodedata", "cmath", "statistics", "random", "bisect", "heapq", "ast", "dis",
    "opcode", "inspect", "linecache", "tokenize", "token", "traceback", "difflib", "pprint", "reprlib",
    "filelock", "jinja2", "markupsafe", "packaging", "importlib_metadata", "zipp", "triton_kernels", "_triton",
})
_SPAWN = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
          "pty.spawn", "os.startfile")
_DENIED_PREFIXES = (*_SPAWN, "socket.", "ctypes.", "mmap.", "sys._getframe", "sys._current_frames",
                    "sys.settrace", "sys.setprofile", "sys.addaudithook", "gc.get_", "sys.remote_exec",
                    "cpython.run_", "_thread.start", "os.kill", "os.killpg", "signal.pthread_kill")  # some: 3.12+
_DENIED_ON_GPU = tuple(p for p in _DENIED_PREFIXES if p not in (*_SPAWN, "ctypes."))
_FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back", "f_globals", "f_locals",
                               "f_builtins"})
# Events with a path as first argument: read-only ones need a read root, the others a write root.
_LISTING = frozenset({"os.listdir", "os.scandir", "os.chdir", "glob.glob", "os.listxattr", "os.getxattr"})
_WRITING = frozenset({"os.mkdir", "os.remove", "os.rmdir", "os.rename", "os.link", "os.symlink", "os.truncate",
                      "os.chmod", "os.chown", "os.utime", "os.setxattr", "os.removexattr", "shutil.rmtree",
                      "shutil.copyfile", "shutil.move", "os.chflags", "os.mkfifo", "os.mknod"})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class Denied(PermissionError):
    """What the hook raises: the untrusted code tried something the sandbox does not allow."""


MAX_REFUSALS = 20
REFUSED = "autotune.sandbox.refused"  # the audit event a frozen module raises: the armed hook records it


def refusal(problem: str) -> str:
    """A refusal outside the hook (a frozen module's), told to the hook, which records it; the text of the
    exception to raise for it. What decides a verdict is `Guard.refused()`, never that text, which the untrusted
    code may catch, or write itself."""
    sys.audit(REFUSED, problem)
    return f"not allowed in the sandbox: {problem}"


class Guard:
    def __init__(self, *, read: Sequence[str], write: Sequence[str] = (), gpu: bool = False):
        """`gpu`: Triton compiles on a kernel's first launch, inside the untrusted call: it runs ptxas and a C
        compiler, loads the launcher it built (import, ctypes) and reads the CUDA libraries; so processes,
        ctypes and imports are not denied, and the system directories are readable (the process confinement
        still holds: own namespaces, an unprivileged uid, no network). Not yet run on a GPU."""
        system = ("/usr", "/etc", "/dev", "/sys", "/proc") if gpu else ()
        self._read = tuple(_root(p) for p in [*read, *write, *system, "/proc/self", "/dev/null", "/dev/urandom"] if p)
        self._write = tuple(_root(p) for p in write if p)
        self._denied = _DENIED_ON_GPU if gpu else _DENIED_PREFIXES
        self._imports = None if gpu else ALLOWED_IMPORTS
        # read by the hook on every event; "refused": what it refused, its own record, which only the hook writes
        # (nothing in sys.modules holds it: the untrusted code can add to it through REFUSED, never take away)
        self._state: dict[str, Any] = {"armed": False, "trusted": 0, "log": None, "refused": []}

    def arm(self, log: set | None = None) -> None:
        """Install the hook (for good: audit hooks cannot be removed). With `log`, nothing is denied and what
        would have been is added to it instead (used to measure what legitimate code needs)."""
        state, read, write, denied, imports = self._state, self._read, self._write, self._denied, self._imports
        state["log"] = log

        def hook(event: str, args: tuple) -> None:
            if state["trusted"] or not state["armed"]:
                return
            problem = str(args[0]) if event == REFUSED and args else _check(event, args, read, write, denied,
                                                                             imports)
            if problem is None:
                return
            if state["log"] is not None:
                state["log"].add(problem)
                return
            if len(state["refused"]) < MAX_REFUSALS:
                state["refused"].append(problem)
            if event != REFUSED:  # a frozen module raises its own
                raise (ImportError if event == "import" else Denied)(f"not allowed in the sandbox: {problem}")

        sys.addaudithook(hook)
        state["armed"] = True

    def refused(self) -> list[str]:
        """What the hook and the frozen and sealed modules refused while it was armed (the first MAX_REFUSALS), in
        order. A method, so that the child's code reaches it once its modules are sealed."""
        return list(self._state["refused"])

    @contextlib.contextmanager
    def trusted(self):
        """The child's own code, between calls into the untrusted code: nothing is checked."""
        self._state["trusted"] += 1
        try:
            yield
        finally:
            self._state["trusted"] -= 1


def _root(path: str) -> str:
    return os.path.realpath(path).rstrip("/") or "/"


def _within(path, roots: tuple[str, ...]) -> bool:
    if isinstance(path, int):  # an already open descriptor
        return True
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str):
        return False
    real = os.path.realpath(os.path.abspath(path))
    return any(real == r or real.startswith(r + "/") or r == "/" for r in roots)


def _check(event: str, args: tuple, read: tuple[str, ...], write: tuple[str, ...], denied: tuple[str, ...],
           imports: frozenset[str] | None) -> str | None:
    """Why `event` is denied, or None."""
    if event == "open":
        path, mode, flags = (list(args) + [None, None, 0])[:3]
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool((flags or 0) & _WRITE_FLAGS)
        if path is None or _within(path, write if writing else read):
            return None
        return f"open {path!r} for {'writing' if writing else 'reading'}"
    if event == "mmap.__new__" and args and args[0] == -1:  # an anonymous map is memory, as any allocation is
        return None
    if event == "import":
        name = args[0] if args else ""
        return None if imports is None or str(name).split(".")[0] in imports else f"import {name}"
    if event == "object.__getattr__":
        return f"access to {args[1]}" if len(args) > 1 and args[1] in _FRAME_ATTRIBUTES else None
    if event in _LISTING:
        return None if not args or _within(args[0], read) else f"{event} {args[0]!r}"
    if event in _WRITING:
        return None if args and _within(args[0], write) else f"{event} {args[0] if args else ''!r}"
    if event.startswith(denied):
        return event
    return None


class _FrozenModule(types.ModuleType):
    """A module whose existing attributes cannot be replaced or deleted (new ones may be added)."""

    def __setattr__(self, name: str, value) -> None:
        if name == "__class__" or name in types.ModuleType.__getattribute__(self, "__dict__"):
            raise Denied(refusal(f"replacing {self.__name__}.{name}"))
        types.ModuleType.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        raise Denied(refusal(f"deleting {self.__name__}.{name}"))


# Not frozen: the Triton interpreter swaps triton.language's functions for its own on every launch (measured:
# "replacing triton.language.abs" otherwise); sys and builtins are written by the interpreter itself, and
# warnings.catch_warnings swaps warnings.filters and showwarning by assignment.
NOT_FROZEN = ("sys", "builtins", "warnings", "triton.language")


def freeze_modules(skip: tuple[str, ...] = NOT_FROZEN) -> int:
    """Freeze every plain module loaded so far but `skip` and their submodules (custom module classes, torch's
    config modules say, keep their own rules); the number frozen."""
    frozen = 0
    for name, module in list(sys.modules.items()):
        if type(module) is types.ModuleType and not any(name == s or name.startswith(s + ".") for s in skip):
            module.__class__ = _FrozenModule
            frozen += 1
    return frozen


class _SealedModule(_FrozenModule):
    """A frozen module whose contents cannot even be read through it (only its identity: __name__, __spec__
    ...): for the modules of the code that reports on the untrusted code, which nothing else reads."""

    def __getattribute__(self, name: str):
        if name == "__dict__" or not (name.startswith("__") and name.endswith("__")):
            raise Denied(refusal(f"reading {types.ModuleType.__getattribute__(self, '__name__')}.{name}"))
        return types.ModuleType.__getattribute__(self, name)


def seal_modules(names: tuple[str, ...]) -> None:
    """Seal these modules (loaded plain or frozen modules; others are left alone). Their own functions still
    run: a function reads its module's globals directly, not through the module object."""
    for name in names:
        module = sys.modules.get(name)
        if type(module) in (types.ModuleType, _FrozenModule):
            types.ModuleType.__setattr__(module, "__class__", _SealedModule)
