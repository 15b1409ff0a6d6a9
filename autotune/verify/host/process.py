"""The candidate's own process, the host: it imports the candidate and calls its entry function on tensors that
hold none of the cases' values.

Forked by the checker's sandboxed worker (autotune.verify.worker) before the real case data reaches that
process, confined on its own (own uid, PID, mount and network namespaces, seccomp where available), it never
holds an input value, a reference answer or the judge's pipe. What it has:
- the candidate's source and, per case, where each input sits (shape, strides, storage offset, dtype) and the
  scalar arguments; its tensors are NaN-filled stand-ins of those shapes;
- one pipe to the device process (autotune.verify.device.process), to which it reports, per call, every Triton launch
  (kernel, arguments as tensor references, meta-parameters, grid) and every data-moving aten op the launcher
  ran (allocations, copies, zero fills), and the tensors the call returned. The device runs those launches
  and ops on the real data and alone makes the evidence the judge sees.

So torch math in the candidate's Python computes on stand-ins and reaches nothing, a launch it does not report
never runs, and a launch it forges is a real launch. What runs here besides the candidate is a further layer,
as before the split: the static policy's run-time half (a record of the aten ops a call runs), the audit hook,
frozen and sealed modules, a check that the module's globals are the same after every call.

`@triton.autotune` runs here: under the interpreter there is nothing to time, so each case tunes afresh and
takes the next configuration in turn (`_rotating_bench`, which runs one of them once on the call's buffers
first, as a GPU's benchmark runs do), and the device checks that every configuration ran.
"""

from __future__ import annotations

import collections
import importlib.util
import inspect
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode
from triton.runtime import autotuner as triton_autotuner
from triton.runtime import interpreter as triton_interpreter
from triton.runtime.jit import KernelInterface

from autotune.accel import queries
from autotune.sandbox import audit, confine
from autotune.sandbox.runner import trim_traceback
from autotune.verify import protocol as wire
from autotune.verify.interp.memory import aligned_empty, allocate_like_cuda

MODULE_NAME = "candidate"

# Aten ops with no effect on data (views and metadata): the device resolves a view from its reference.
VIEW_OPS = frozenset({
    "aten.view", "aten._unsafe_view", "aten.reshape", "aten._reshape_alias", "aten.as_strided", "aten.slice",
    "aten.select", "aten.split", "aten.split_with_sizes", "aten.unbind", "aten.expand", "aten.squeeze",
    "aten.unsqueeze", "aten.flatten", "aten.unflatten", "aten.permute", "aten.transpose", "aten.t", "aten.alias",
    "aten.detach", "aten.lift_fresh", "aten.sym_size", "aten.sym_stride", "aten.sym_numel",
    "aten.sym_storage_offset", "aten.is_contiguous", "aten.narrow", "aten.chunk", "aten.view_as",
})


class Recorder(TorchDispatchMode):
    """Counts the aten ops a call runs (dtype conversions named as such) and notes, in the call's event list,
    every op that is not a view: the device repeats allocations, copies and fills on the real data, and
    refuses the rest."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ in torch._disable_dynamo, which imports torch._dynamo on the
        # first op: 2.5 s of start-up (measured), for a guard against torch.compile tracing into the mode, which
        # nothing here does (the policy refuses torch.compile in a candidate)
        return False

    def __init__(self, events: list | None = None):
        super().__init__()
        self.seen: collections.Counter[str] = collections.Counter()
        self.events = events

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func.overloadpacket)
        self.seen[_label(name, args, kwargs)] += 1
        out = allocate_like_cuda(func, args, kwargs, values=False)  # 512-byte aligned, as CUDA's; values unread
        out = func(*args, **kwargs) if out is None else out
        if self.events is not None and name not in VIEW_OPS:
            self.events.append({"op": name, "args": _refs(args), "kwargs": _refs(kwargs), "out": _refs(out)})
        return out


def _label(name: str, args, kwargs) -> str:
    if name == "aten._to_copy" and "dtype" in kwargs and kwargs["dtype"] != args[0].dtype:
        return f"{name} (dtype conversion)"
    if name == "aten.copy_" and len(args) > 1 and isinstance(args[1], torch.Tensor) and args[0].dtype != args[1].dtype:
        return f"{name} (dtype conversion)"
    return name


def _refs(value, depth: int = 0):
    """Tensors as references, the rest as plain values the wire takes (anything else by its type's name)."""
    if type(value) is torch.Tensor or isinstance(value, torch.Tensor):
        return wire.ref_of(value)
    if isinstance(value, (list, tuple)) and depth < 2:
        return [_refs(v, depth + 1) for v in value]
    if isinstance(value, dict) and depth < 2:
        return {str(k): _refs(v, depth + 1) for k, v in value.items()}
    if isinstance(value, tl.dtype):
        return {"tl_dtype": str(value)}
    if isinstance(value, tl.constexpr):
        return _refs(value.value, depth)
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if value is None or type(value) in (int, float, bool, str):
        return value
    return {"type": type(value).__name__}


class _Calls:
    """The launches of the call under way, reported instead of run."""

    def __init__(self):
        self.events: list[dict] | None = None
        self.hook = None  # InterpretedFunction.run as `prepare` set it (checked after every call)

    def launch(self, kernel, args: tuple, kwargs: dict, grid) -> None:
        if self.events is None:
            raise RuntimeError("a Triton kernel was launched outside a call of the entry function")
        params = inspect.signature(kernel.fn).parameters
        bound = inspect.signature(kernel.fn).bind_partial(*args, **{k: v for k, v in kwargs.items() if k in params})
        bound.apply_defaults()  # a grid function gets the kernel's arguments by name, as JITFunction.run gives them
        grid = grid(dict(bound.arguments)) if callable(grid) else grid
        self.events.append({"launch": kernel.fn.__name__, "args": _refs(list(args)), "kwargs": _refs(kwargs),
                            "grid": [int(g) for g in tuple(grid)]})


_calls = _Calls()


def _report_launches() -> None:
    """Every interpreted launch (autotuned and heuristic ones end here too, with their final meta-parameters)
    is reported to the device instead of being run."""
    def run(self, *args, grid, warmup, **kwargs):
        if not warmup:
            _calls.launch(self, args, kwargs, grid)

    triton_interpreter.InterpretedFunction.run = run


_triton_bench = triton_autotuner.Autotuner._bench


def _rotating_bench(self, *args, config, **meta) -> list[float]:
    """@triton.autotune here: nothing can be timed, so each tuning ranks the configurations from the autotuner's
    turn on (the host moves every autotuner one turn on at each case), and across the cases each one runs. A
    GPU's tuning runs every configuration many times on the call's own buffers (with the `reset_to_zero` and
    `restore_value` hooks) before the chosen one runs for real; here the first configuration of each tuning runs
    once that way, through Triton's own `_bench`, so a kernel whose answer depends on the runs before it (an
    accumulator no hook resets) is wrong here as it is there."""
    turn = getattr(self, "_autotune_turn", 0)
    rank = float((self.configs.index(config) - turn) % len(self.configs))
    if getattr(self, "_autotune_benched", None) is self.nargs:  # Autotuner.run makes nargs anew for each call
        return [rank, rank, rank]
    self._autotune_benched = self.nargs
    vars(self)["do_bench"] = lambda kernel_call, quantiles=None, **_: (kernel_call(), [rank, rank, rank])[1]
    try:
        return _triton_bench(self, *args, config=config, **meta)
    finally:
        vars(self).pop("do_bench", None)


def autotuners(module) -> dict[str, triton_autotuner.Autotuner]:
    """The candidate's autotuned kernels by the jit function's name."""
    found = {}
    for value in list(vars(module).values()):
        chain = value
        while isinstance(chain, KernelInterface) and not isinstance(chain, triton_interpreter.InterpretedFunction):
            if isinstance(chain, triton_autotuner.Autotuner):
                found[_base_name(chain)] = chain
            chain = getattr(chain, "fn", None)
    return found


def _base_name(interface) -> str:
    while not isinstance(interface, triton_interpreter.InterpretedFunction):
        interface = interface.fn
    return interface.fn.__name__


def config_wire(config: triton.Config) -> dict:
    return {"kwargs": _refs(dict(config.kwargs)), "num_warps": config.num_warps, "num_stages": config.num_stages,
            "num_ctas": getattr(config, "num_ctas", 1)}


def load(source: str, entry: str, workdir: Path, import_ops: collections.Counter):
    """Write the candidate into the private directory and import it, recording the aten ops its import runs;
    (its module, its entry function)."""
    path = workdir / f"{MODULE_NAME}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    assert spec is not None and spec.loader is not None  # a .py file's location always has a loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE_NAME] = module
    with Recorder() as ops:
        spec.loader.exec_module(module)
    import_ops.update(ops.seen)
    fn = getattr(module, entry, None)
    if not callable(fn):
        raise NameError(f"the candidate defines no function `{entry}`")
    return module, fn


def stand_in(place: wire.Placement) -> torch.Tensor:
    """A tensor with the placement's storage size, offset, shape and strides (512-byte aligned, as on a GPU),
    holding whatever the memory held, never the case's values."""
    total, offset = place.layout()
    return aligned_empty((total,), wire.DTYPES[place.dtype], fill=False).as_strided(place.shape, place.stride, offset)


def case_args(case: wire.HostCase) -> list:
    return [stand_in(wire.Placement.from_wire(a["place"])) if isinstance(a, dict) and "place" in a else a
            for a in case.args]


class Tampered(RuntimeError):
    """The candidate removed the op recorder or the launch reporting, or changed its module's globals."""


def _snapshot(module) -> dict[str, tuple]:
    """What the module's globals and its functions' default values are now: each value's identity and, for a
    container, its length and its items' identities (an `.append` on a module-level list shows)."""
    names = {name: value for name, value in vars(module).items() if not name.startswith("__")}
    found = {name: _fingerprint(value) for name, value in names.items()}
    for name, value in names.items():
        if inspect.isfunction(value):
            found[f"{name} (default arguments)"] = (_fingerprint(value.__defaults__),
                                                    _fingerprint(value.__kwdefaults__))
    return found


def _fingerprint(value, depth: int = 0) -> tuple:
    if isinstance(value, (list, tuple, set, frozenset, dict)) and depth < 3:
        items = [x for kv in value.items() for x in kv] if isinstance(value, dict) else list(value)  # no fresh pairs
        return (id(value), len(value), tuple(_fingerprint(v, depth + 1) for v in items[:64]))
    return (id(value),)


def call(fn, args: list, module, globals_before: dict, events: list) -> tuple[list, collections.Counter]:
    """One call of the entry function; (its outputs, the aten ops it ran), its launches and data ops in `events`."""
    _calls.events = events
    try:
        with Recorder(events) as ops:
            out = fn(*args)
            recording = _get_current_dispatch_mode() is ops
    finally:
        _calls.events = None
    if not recording:
        raise Tampered("the candidate removed the checker's op recorder")
    if triton_interpreter.InterpretedFunction.run is not _calls.hook:
        raise Tampered("the candidate removed the checker's report of its Triton launches")
    now = _snapshot(module)
    changed = [n for n in {**globals_before, **now} if globals_before.get(n) != now.get(n)]  # dunders left out
    if changed:
        raise Tampered(f"a call changed the module-level `{changed[0]}` (a candidate keeps no state between calls)")
    return (list(out) if isinstance(out, (tuple, list)) else [out]), ops.seen


def output_refs(outs: list) -> list:
    return [wire.ref_of(o) if type(o) is torch.Tensor else {"type": type(o).__name__} for o in outs]


def work(payload: dict, send, receive_fd: int) -> dict:
    """The host's side of the check (run in the forked host process): import the candidate, then run each case
    the device hands over, until it says there are no more."""
    prepare(queries.DeviceFacts(**payload["device_facts"]) if payload.get("device_facts") else queries.SM90)
    workdir = Path.cwd()
    log: set[str] | None = set() if payload.get("audit_log") else None
    guard = _arm(workdir, log)
    import_ops: collections.Counter = collections.Counter()
    candidate_file = str(workdir / f"{MODULE_NAME}.py")
    try:
        module, fn = load(payload["source"], payload["entry"], workdir, import_ops)
    except BaseException as e:  # noqa: BLE001 - untrusted code's failure, of any kind, is reported, never raised here
        with guard.trusted():  # formatting a traceback reads its frames
            wire.HostCompileError(trim_traceback(e, keep_files=(candidate_file,)),
                                  defence_refused=guard.refused()).send(send)
        return {"cases_run": 0}
    tuners = autotuners(module)
    wire.HostImportOps(dict(import_ops), {name: [config_wire(c) for c in t.configs] for name, t in tuners.items()}
                       ).send(send)
    globals_before = _snapshot(module)
    done = 0
    while (frame := wire.read(receive_fd, limit=1 << 30)) is not None and isinstance(
            case := wire.parse_to_host(frame), wire.HostCase):
        for t in tuners.values():  # a fresh tuning per case, the next configuration in turn
            t.cache.clear()
            t._autotune_turn = getattr(t, "_autotune_turn", payload.get("autotune_turn", 0)) + 1
        try:
            _run_case(fn, case, module, globals_before, send)
        except BaseException as e:  # noqa: BLE001 - untrusted code's failure, of any kind, is reported, never raised here
            with guard.trusted():
                wire.HostCaseError(trim_traceback(e, keep_files=(candidate_file,)), index=case.index, dry=case.dry,
                                   tampered=isinstance(e, Tampered), defence_refused=guard.refused()).send(send)
            return {"cases_run": done}
        done += 1
    if log is not None:
        wire.HostAuditLog(sorted(log)).send(send)
    wire.HostDone(guard.refused()).send(send)
    return {"cases_run": done}


def _run_case(fn, case: wire.HostCase, module, globals_before: dict, send) -> None:
    args = case_args(case)
    inputs = [wire.ref_of(a) if isinstance(a, torch.Tensor) else None for a in args]
    kept = []  # every output of the case stays alive, as a caller holds them: no two calls share an address
    for k in range(case.calls):
        events: list = []
        outs, ops = call(fn, args, module, globals_before, events)
        wire.Call(case.index, k, events, inputs=inputs, outputs=output_refs(outs), torch_ops=dict(ops),
                  dry=case.dry).send(send)
        kept.append(outs)


# The modules of the code that reports on the candidate: sealed once it is imported (autotune.sandbox.audit).
_SEALED = ("__main__", "autotune.verify.worker", "autotune.verify.host.process", "autotune.verify.device.process",
           "autotune.verify.device.replay", "autotune.verify.device.buffers", "autotune.verify.device.evidence",
           "autotune.verify.device.coverage", "autotune.verify.device.frontend",
           "autotune.sandbox", "autotune.sandbox.runner", "autotune.sandbox.channel", "autotune.sandbox.audit",
           "autotune.sandbox.confine", "autotune.sandbox.namespaces", "autotune.sandbox.limits",
           "autotune.verify.interp.launch", "autotune.verify.interp.bounds", "autotune.verify.interp.races",
           "autotune.verify.interp.numerics", "autotune.verify.interp.memory")


def _arm(workdir: Path, log: set[str] | None) -> audit.Guard:
    """The in-process layer, armed right before the candidate is imported: reads only of the private directory and
    the Python installation, writes only into it; every loaded module frozen, the checker's sealed."""
    guard = audit.Guard(read=[str(workdir), *confine.python_paths()], write=[str(workdir)], gpu=False)
    audit.freeze_modules()
    audit.seal_modules(_SEALED)
    guard.arm(log)
    return guard


def prepare(facts: queries.DeviceFacts = queries.SM90) -> None:
    """What the host needs before the candidate arrives (only in the host: the device interprets for real):
    launches reported instead of run, autotuning by turns, the launcher's device queries answered as `facts`."""
    queries.answer(facts)
    _report_launches()
    _calls.hook = triton_interpreter.InterpretedFunction.run
    triton_autotuner.Autotuner._bench = _rotating_bench
