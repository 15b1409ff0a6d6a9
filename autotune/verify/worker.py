"""The candidate's process: imports one candidate file and runs it on the cases the judge sends.

Started by the judge through `sandbox.run_isolated("autotune.verify.worker", payload, ...)`, never
imported by it. Everything here is trusted until the candidate is imported; after that, everything this
process sends is treated as untrusted evidence and re-checked by the judge, which alone holds the
references (this module imports no target and no reference).

Before the candidate is imported:
- fresh allocations read as NaN (`use_deterministic_algorithms` + `fill_uninitialized_memory`), so an
  output the kernel never wrote (too few programs, skipped rows) cannot pass as a stale right answer;
- Triton launches are counted (JITFunction.run on a GPU, InterpretedFunction.run under the interpreter);
- a TorchDispatchMode records every aten op the candidate's Python runs during its import (reported as
  `import_ops`) and during a call (kernel launches included, so that math hidden in a grid function is
  seen too);
- the run-time defence (`_arm`): an audit hook that denies files outside the private directory and the
  Python installation, processes, sockets, ctypes, frames and new imports outside an allow-list
  (autotune.sandbox.audit); every plain module loaded so far is frozen, and this module and the runner's
  are sealed: the candidate cannot reach or replace `run_case`, the launch counter or the channel.
  The launch counter and the op recorder are checked to still be in place after every call.

Each floating input sits, with the strides and storage offset of the case's layout, in a NaN-filled
buffer with a guard band after it (and before it, unless the case wants storage offset 0): reading past
an input's end or a padding element reads NaN (it shows in the output), writing there breaks the guard
(reported). Every output of every call is kept alive for the whole run, so an output that shares memory
with an earlier one (a reused buffer) is seen.

Per case it sends `case_start` first (so a crash can be placed), then `case_result` with the outputs of
the first call, of a repeat on the same inputs and of a call after the same buffers were refilled with new
values, the inputs as left after the calls, aliasing, launches and the aten ops seen.
"""

from __future__ import annotations

import collections
import functools
import importlib.util
import os
import sys
from pathlib import Path

import torch
import triton  # noqa: F401 - imported before the candidate so that its launchers can be wrapped
# What Triton imports lazily on a kernel's first launch (measured: 0.5 s), imported before the audit hook is
# armed: the gluon import runs typing.TypeVar, which reads its caller's frame, which the hook denies.
import triton.compiler.code_generator  # noqa: F401
import triton.experimental.gluon._runtime  # noqa: F401
import triton.language.extra.libdevice  # noqa: F401
from torch.utils._python_dispatch import TorchDispatchMode
from triton.runtime import autotuner as triton_autotuner
from triton.runtime import interpreter as triton_interpreter
from triton.runtime import jit as triton_jit

from torch.utils._python_dispatch import _get_current_dispatch_mode

from autotune.sandbox import audit, confine
from autotune.sandbox.runner import child_main, trim_traceback
from autotune.verify import interp
from autotune.verify.frontend import FrontEnd
from autotune.verify.gpu_memory import aligned_empty, allocate_like_cuda
from autotune.verify.races import race_in

MODULE_NAME = "candidate"


def _launch_counter():
    """Count Triton launches (JITFunction.run on a GPU, InterpretedFunction.run under the interpreter); the
    count lives in this closure, not in a module global. Returns (reset, read, still_installed)."""
    count = [0]

    def counting(run):
        @functools.wraps(run)
        def run_counted(self, *args, grid, warmup, **kwargs):
            if not warmup:
                count[0] += 1
            return run(self, *args, grid=grid, warmup=warmup, **kwargs)

        return run_counted

    wrappers = {cls: counting(cls.run) for cls in (triton_jit.JITFunction, triton_interpreter.InterpretedFunction)}
    for cls, wrapper in wrappers.items():
        cls.run = wrapper

    def reset() -> None:
        count[0] = 0

    def installed() -> bool:
        return all(cls.__dict__.get("run") is wrapper for cls, wrapper in wrappers.items())

    return reset, lambda: count[0], installed


_reset_launches, _read_launches, _counter_installed = _launch_counter()


def _rotating_bench(self, *args, config, **meta) -> list[float]:
    """@triton.autotune under the interpreter: there is no GPU to time configs on (its benchmarker raises
    "0 active drivers"), so each new tuning (a new key: shape, dtype) picks the next config in turn, and
    across the cases every config a GPU might pick gets checked."""
    if config is self.configs[0]:
        self._autotune_verify_tunings = getattr(self, "_autotune_verify_tunings", -1) + 1
    turn = getattr(self, "_autotune_verify_tunings", 0)
    rank = float((self.configs.index(config) - turn) % len(self.configs))
    return [rank, rank, rank]


if triton.knobs.runtime.interpret:
    triton_autotuner.Autotuner._bench = _rotating_bench
    interp.install_gpu_semantics()  # program order, tl.dot, casts, scalars, races as on a GPU (verify/interp.py)


class _AtenOps(TorchDispatchMode):
    """Counts the aten ops run under it; dtype conversions are named as such."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ in torch._disable_dynamo, which imports torch._dynamo on the
        # first op: 2.5 s of every worker's start-up (measured), for a guard against torch.compile tracing into
        # the mode, which nothing in the worker does (the policy refuses torch.compile in a candidate)
        return False

    def __init__(self):
        super().__init__()
        self.seen: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.seen[_label(func, args, kwargs)] += 1
        aligned = allocate_like_cuda(func, args, kwargs)  # CPU allocations 512-byte aligned, as CUDA's are
        return func(*args, **kwargs) if aligned is None else aligned


def _label(func, args, kwargs) -> str:
    name = str(func.overloadpacket)
    if name == "aten._to_copy" and "dtype" in kwargs and kwargs["dtype"] != args[0].dtype:
        return f"{name} (dtype conversion)"
    if name == "aten.copy_" and len(args) > 1 and isinstance(args[1], torch.Tensor) and args[0].dtype != args[1].dtype:
        return f"{name} (dtype conversion)"
    return name


def load(source: str | None, entry: str, workdir: Path, import_ops: collections.Counter | None = None):
    """Write the candidate into the private directory and import it (recording the aten ops its import
    runs into `import_ops`); its entry function."""
    path = workdir / f"{MODULE_NAME}.py"
    if source is not None:  # None: written before the run-time defence was armed
        path.write_text(source)
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE_NAME] = module
    with _AtenOps() as ops:
        spec.loader.exec_module(module)
    if import_ops is not None:
        import_ops.update(ops.seen)
    fn = getattr(module, entry, None)
    if not callable(fn):
        raise NameError(f"the candidate defines no function `{entry}`")
    return fn


class Tampered(RuntimeError):
    """The candidate removed the launch counter or the op recorder: its evidence cannot be trusted."""


def _call(fn, args: list) -> tuple[list, int, collections.Counter]:
    _reset_launches()
    with _AtenOps() as ops:
        out = fn(*args)
        recording = _get_current_dispatch_mode() is ops
    if not recording or not _counter_installed():
        raise Tampered("the candidate removed the checker's " + ("op recorder" if not recording else
                                                                 "Triton launch counter"))
    return (list(out) if isinstance(out, (tuple, list)) else [out]), _read_launches(), ops.seen


def _snapshot(outs: list) -> tuple[list, list[str]]:
    """Host copies of plain-tensor outputs (None for anything else) and every output's type name."""
    copies = [o.detach().to("cpu").clone() if type(o) is torch.Tensor else None for o in outs]
    return copies, [type(o).__name__ for o in outs]


def _span(t: torch.Tensor) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.data_ptr() + s.nbytes()


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a0 < b1 and b0 < a1 and a1 > a0 and b1 > b0  # both non-empty and overlapping


def _aliased(outs: list, args: list) -> list[tuple[int, int]]:
    """(output j, argument i) pairs whose storages overlap."""
    return [(j, i) for j, o in enumerate(outs) for i, a in enumerate(args)
            if type(o) is torch.Tensor and isinstance(a, torch.Tensor) and _overlap(o, a)]


# Every output of every call of this run, kept alive: a correct kernel returns fresh tensors, so while the
# worker holds them no later output can share their memory. One that does reuses a buffer it kept (a ring
# of N buffers shows at call N + 1, however large N is).
_kept: list[torch.Tensor] = []


def _reused(outs: list, call: int) -> list[tuple[int, int]]:
    """(call, output j) for each output that shares storage with a kept output or another of this call."""
    found = []
    for j, o in enumerate(outs):
        if type(o) is not torch.Tensor:
            continue
        if any(_overlap(o, k) for k in _kept):
            found.append((call, j))
        _kept.append(o)
    return found


def _strides(outs: list) -> list:
    return [list(o.stride()) if type(o) is torch.Tensor else None for o in outs]


def _bits_equal(o, copy: torch.Tensor) -> bool:
    """The live output still holds, bit for bit, what was copied right after its call."""
    if type(o) is not torch.Tensor:
        return False
    a = o.detach().to("cpu")
    if a.shape != copy.shape or a.dtype != copy.dtype:
        return False
    return torch.equal(a.reshape(-1).view(torch.uint8), copy.reshape(-1).view(torch.uint8))


class _Guarded:
    """An input placed with the strides and storage offset the judge gave it inside a NaN-filled buffer, with
    a guard band after it and (unless the case wants storage offset 0) before it. Every element of the buffer
    that is not the input's (guards, padding between rows, the other heads of a qkv row) is NaN: a kernel that
    reads one gets NaN in its output; one that writes one is caught by `intact`."""

    def __init__(self, t: torch.Tensor, device: str, front: bool):
        guard = max(4096, t.shape[-1] if t.dim() else 1)
        extent = t.untyped_storage().nbytes() // t.element_size()
        lead = guard if front else 0
        size = (lead + extent + guard,)  # on the CPU aligned as CUDA's allocator aligns (verify/gpu_memory.py)
        self.buffer = (aligned_empty(size, t.dtype) if device == "cpu"  # NaN-filled, as fresh floats are
                       else torch.full(size, float("nan"), dtype=t.dtype, device=device))
        self.inner = self.buffer.as_strided(t.shape, t.stride(), lead + t.storage_offset())
        self.inner.copy_(t)
        self.outside = torch.ones(self.buffer.numel(), dtype=torch.bool, device=device)
        self.outside.as_strided(t.shape, t.stride(), lead + t.storage_offset()).fill_(False)

    def intact(self) -> bool:
        return bool(torch.isnan(self.buffer[self.outside]).all())


def _place(case: dict, device: str) -> tuple[list, list]:
    front = case.get("front_guard", True)
    guarded = [_Guarded(a, device, front) if isinstance(a, torch.Tensor) and a.is_floating_point() else None
               for a in case["args"]]
    args = [g.inner if g else (a.to(device) if isinstance(a, torch.Tensor) else a)
            for a, g in zip(case["args"], guarded)]
    return args, guarded


def _inputs_now(args: list) -> list:
    return [a.detach().to("cpu").clone() if isinstance(a, torch.Tensor) else None for a in args]


def _restore(args: list, values: list) -> None:
    """The inputs back to `values` (an op that writes in place changed them; the next call needs them)."""
    for a, new in zip(args, values):
        if isinstance(a, torch.Tensor):
            a.copy_(new.to(a.device))


def run_case(fn, case: dict, device: str) -> dict:
    args, guarded = _place(case, device)
    outs, launches, ops = _call(fn, args)
    first, types = _snapshot(outs)
    frame = {"index": case["index"], "outputs": first, "output_types": types, "launches": [launches],
             "output_strides": _strides(outs), "aliased": _aliased(outs, args), "reused": _reused(outs, 0),
             "inputs_after": _inputs_now(args)}
    if case["repeat"]:
        _restore(args, case["args"])
        again, n, more = _call(fn, args)
        frame["repeat_outputs"] = _snapshot(again)[0]
        frame["repeat_inputs_after"] = _inputs_now(args)
        frame["launches"].append(n)
        frame["aliased"] += _aliased(again, args)
        frame["reused"] += _reused(again, 1)
        ops.update(more)
    if case.get("refill_args") is not None:
        _restore(args, case["refill_args"])
        refilled, n, more = _call(fn, args)
        frame["refill_outputs"] = _snapshot(refilled)[0]
        frame["refill_inputs_after"] = _inputs_now(args)
        frame["launches"].append(n)
        frame["aliased"] += _aliased(refilled, args)
        frame["reused"] += _reused(refilled, 2)
        ops.update(more)
    frame["clobbered"] = not all(c is None or _bits_equal(o, c) for o, c in zip(outs, first))
    frame["guards_broken"] = [i for i, g in enumerate(guarded) if g and not g.intact()]
    frame["torch_ops"] = dict(ops)
    return frame


# What the Triton compiler would reject on a GPU shows up under the interpreter as an InterpreterError
# caused by one of these (measured: a typo `tl.lod` -> AttributeError, an undefined name -> NameError).
_REJECTED_BY_A_COMPILER = ("NameError", "AttributeError", "TypeError", "SyntaxError", "UnboundLocalError",
                           "ImportError", "NotImplementedError", "CompilationError")


def _is_compile_error(e: BaseException) -> bool:
    """The kernel did not compile: Triton's CompilationError (GPU), or the interpreter's equivalent (CPU)."""
    seen, interpreted = set(), False
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        name = type(e).__name__
        if name == "CompilationError" or (interpreted and name in _REJECTED_BY_A_COMPILER):
            return True
        interpreted = interpreted or name == "InterpreterError"
        e = e.__cause__ or e.__context__
    return False


def work(payload: dict, send) -> dict:
    # The public torch.use_deterministic_algorithms also imports torch._inductor to set its flag: 1.7 s of
    # start-up (measured) for a compiler a candidate may not use; the eager flag is this one.
    torch._C._set_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    workdir = Path.cwd()
    candidate_file = str(workdir / f"{MODULE_NAME}.py")
    if payload["device"] == "cuda" and not torch.cuda.is_available():
        send("setup_error", error="no GPU is visible inside the isolated process (check /dev/nvidia* permissions "
                                  "for an unprivileged uid, or run with device=cpu)")
        return {"cases_run": 0}
    Path(candidate_file).write_text(payload["source"])
    FrontEnd.write(payload["source"], workdir)
    before_each_launch = interp.before_each_launch  # read before the seal makes the module unreadable
    denied: set[str] | None = set() if payload.get("audit_log") else None
    guard = _arm(workdir, denied)
    import_ops: collections.Counter = collections.Counter()
    try:
        fn = load(None, payload["entry"], workdir, import_ops)
        if triton.knobs.runtime.interpret:  # on a GPU the real compiler runs at the first launch
            before_each_launch(_trusted(guard, FrontEnd.load(workdir).check))
    except BaseException as e:  # noqa: BLE001 - whatever the import raises is the candidate's compile error
        with guard.trusted():  # formatting a traceback reads its frames
            send("compile_error", error=trim_traceback(e, keep_files=(candidate_file,)))
        return {"cases_run": 0}
    send("import_ops", torch_ops=dict(import_ops))
    for n, case in enumerate(payload["cases"]):
        send("case_start", index=case["index"])
        try:
            frame = run_case(fn, case, payload["device"])
        except BaseException as e:  # noqa: BLE001 - a failing call is the candidate's runtime error
            with guard.trusted():
                send("case_error", index=case["index"], compile=_is_compile_error(e), tampered=isinstance(e, Tampered),
                     race=race_in(e), error=trim_traceback(e, keep_files=(candidate_file,)))
            return {"cases_run": n}
        send("case_result", **frame)
    if denied is not None:
        send("audit_log", denied=sorted(denied))
    return {"cases_run": len(payload["cases"])}


# The modules of the code that reports on the candidate: sealed once it is imported (autotune.sandbox.audit).
_SEALED = ("__main__", "autotune.verify.worker", "autotune.sandbox", "autotune.sandbox.runner",
           "autotune.sandbox.channel", "autotune.sandbox.audit", "autotune.sandbox.confine",
           "autotune.sandbox.namespaces", "autotune.sandbox.limits", "autotune.verify.interp",
           "autotune.verify.frontend", "autotune.verify.gpu_numerics", "autotune.verify.gpu_memory",
           "autotune.verify.races")


def _trusted(guard: audit.Guard, check):
    """Triton's front end is the checker's code, run on the candidate's AST (it executes none of the
    candidate's Python): it may use what the hook denies the candidate (sys._getframe)."""
    def run(*args, **kwargs):
        with guard.trusted():
            return check(*args, **kwargs)

    return run


def _arm(workdir: Path, log: set[str] | None) -> audit.Guard:
    """The run-time defence, armed right before the candidate is imported: reads only of the private directory
    and the Python installation, writes only into the Triton/Inductor caches and the private tmp (a GPU compile
    writes there); every loaded module frozen, this one and the runner's sealed. `log`: measure, deny nothing."""
    writable = [os.environ.get(k, "") for k in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TMPDIR")]
    guard = audit.Guard(read=[str(workdir), *confine.python_paths()], write=writable, gpu=torch.cuda.is_available())
    audit.freeze_modules()
    audit.seal_modules(_SEALED)
    guard.arm(log)
    return guard


if __name__ == "__main__":
    child_main(work)
