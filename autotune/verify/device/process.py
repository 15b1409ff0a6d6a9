"""The device process: it holds the cases' real data and runs the candidate's kernels, and alone speaks to the judge.

The sandboxed worker (autotune.verify.worker) forks the candidate's host process first, then reads the judge's
payload. This process never imports the candidate nor runs its Python: the kernels are built from the source's
syntax tree (autotune.verify.device.loader) after the kernel half of the allow-list has passed them. For each of
the judge's cases it hands the host the case without its data, relays and checks the host's frames, and replays
the calls the host reports on the real data (autotune.verify.device.replay), which makes the evidence
(device.evidence); dry calls at served shapes are recorded, not run, for the coverage account (device.coverage).
Frames to the judge: autotune.verify.protocol's device frames.
"""

from __future__ import annotations

from pathlib import Path

import torch

from autotune import accel
from autotune.sandbox.channel import write_all
from autotune.sandbox.runner import trim_traceback
from autotune.verify import protocol
from autotune.verify.device.buffers import Refused
from autotune.verify.device.frontend import CompilationError
from autotune.verify.device.loader import KernelSourceError, load
from autotune.verify.device.replay import Device
from autotune.verify.interp import bounds
from autotune.verify.interp.launch import caused_by
from autotune.verify.interp.races import race_in
from autotune.verify.interp.sampling import UnwrittenRead
from autotune.verify.static import size

HOST_FRAME_BYTES = 64 << 20  # a call's events and references: a few KB; a compile error's traceback: a few KB
TEXT_LIMIT = protocol.HOST_TEXT  # characters of a host's error text passed on to the judge


def work(payload: dict, send, links) -> dict:
    """The device's side of the check: build the kernels, then take the judge's cases one by one, hand each
    (without its data) to the host, and repeat what the host reports on the data."""
    torch._C._set_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True  # type: ignore[attr-defined]
    dev = accel.get(payload["device"])
    if not dev.available():
        protocol.SetupError("no GPU is visible inside the isolated process (check /dev/nvidia* permissions for an "
                            "unprivileged uid, or run with device=cpu)").send(send)
        return {"cases_run": 0}
    try:
        bounds_of_source = size.SourceLimits.from_wire(payload["source_limits"])
        kernels = load(payload["source"], Path.cwd() / "kernels.py", bounds_of_source)
    except (KernelSourceError, SyntaxError) as e:
        protocol.PolicyError(f"{e}").send(send)
        return {"cases_run": 0}
    except Exception as e:  # noqa: BLE001 - untrusted code's failure, of any kind, is reported, never raised here
        protocol.CompileError(trim_traceback(e)).send(send)
        return {"cases_run": 0}
    device = Device(kernels, send, on_gpu=not dev.interprets_triton)
    done = 0
    while (raw := links.receive()) is not None:
        frame = protocol.parse_stream(raw)
        if isinstance(frame, protocol.CoverageCheck):  # every case before it is done: which dry calls made a
            if not _settled(device, send):  # launch none ran
                return {"cases_run": done}
            device.account.dry_uncovered().send(send)
            continue
        assert isinstance(frame, (protocol.CaseItem, protocol.DryItem))
        if isinstance(frame, protocol.CaseItem):
            device.cases = {frame.index: frame}
        device.dry_probe = isinstance(frame, protocol.DryItem) and frame.probe
        if not _tell_host(links, frame.host):
            follow(device, links.from_host, send)  # the host is gone: what it said last says why
            return {"cases_run": done}
        ended = follow(device, links.from_host, send)
        if ended != "case":
            return {"cases_run": done}
        done += isinstance(frame, protocol.CaseItem)
    if not _settled(device, send):
        return {"cases_run": done}
    _tell_host(links, protocol.End())
    follow(device, links.from_host, send)
    return {"cases_run": done}


def _settled(device: Device, send) -> bool:
    """The compiler's passes still under way, waited for (a launch leaves them running beside the interpreter);
    False, told as a compile error, where they refuse a launch."""
    try:
        device.front.settle()
    except CompilationError as e:
        protocol.CaseError(None, trim_traceback(e, keep_files=("kernels.py",)), compile=True).send(send)
        return False
    return True


def _tell_host(links, msg: protocol.Message) -> bool:
    """Hand the host a message; False when it is gone."""
    try:
        write_all(links.to_host, protocol.encode(msg.to_wire()))
        return True
    except BrokenPipeError:
        return False


def follow(device: Device, host_fd: int, send) -> str:
    """Relay and repeat the host's frames until the case under way is finished ("case"), the host is done
    ("done"), or it fails or breaks the protocol ("stop")."""
    while True:
        try:
            msg = protocol.read(host_fd, limit=HOST_FRAME_BYTES)
        except protocol.ProtocolError as e:  # a frame that does not decode: the host broke the protocol
            protocol.HostProtocol(f"the candidate's process sent a malformed frame: {e}").send(send)
            return "stop"
        if msg is None:
            protocol.HostGone().send(send)
            return "stop"
        try:
            ended = _on_host_frame(device, msg, send)
        except protocol.ProtocolError as e:
            protocol.HostProtocol(str(e)[:TEXT_LIMIT]).send(send)
            return "stop"
        except Refused as e:
            protocol.CaseError(device.case.index if device.case else None, str(e), refused=True).send(send)
            return "stop"
        except BaseException as e:  # noqa: BLE001 - untrusted code's failure, of any kind, is reported, never raised here
            protocol.CaseError(device.case.index if device.case else None,
                               trim_traceback(e, keep_files=("kernels.py",)), compile=_is_compile_error(e),
                               out_of_bounds=caused_by(e, bounds.OutOfBounds) or caused_by(e, UnwrittenRead),
                               race=race_in(e)).send(send)
            return "stop"
        if ended:
            return ended


def _on_host_frame(device: Device, frame: dict, send) -> str:
    """One frame of the host's, read into its record (protocol.parse_host_frame: ProtocolError for a frame that
    does not fit), then relayed or repeated; what it ended ('' for nothing)."""
    msg = protocol.parse_host_frame(frame)
    if isinstance(msg, protocol.Call):
        return "case" if device.on_call(msg) else ""
    if isinstance(msg, protocol.Isolation):
        protocol.HostIsolation(msg.report).send(send)
    elif isinstance(msg, protocol.HostImportOps):
        device.account.configs = msg.autotune
        protocol.ImportOps(msg.torch_ops).send(send)
    elif isinstance(msg, protocol.HostFailure):
        index = msg.index
        if index is not None and index in device.cases and not msg.dry and (
                device.case is None or device.case.index != index):
            protocol.CaseStart(index).send(send)  # the host failed before its first report of the case
        if isinstance(msg, protocol.HostCompileError):
            protocol.CompileError(msg.error, defence_refused=msg.defence_refused).send(send)
        else:
            protocol.CaseError(index, msg.error, dry=msg.dry, tampered=msg.tampered,
                               defence_refused=msg.defence_refused).send(send)
        return "stop"
    elif isinstance(msg, protocol.HostDone):
        if msg.defence_refused:  # the candidate caught a refusal and went on: what it tried still decides
            protocol.CaseError(None, "the candidate went on after the run-time defence refused it",
                               defence_refused=msg.defence_refused).send(send)
            return "stop"
        device.account.report().send(send)
        return "done"
    elif isinstance(msg, protocol.HostAuditLog):
        protocol.AuditLog(msg.denied).send(send)
    return ""


# What Triton's compiler rejects shows up under the interpreter as an InterpreterError caused by one of these
# (measured: a typo `tl.lod` -> AttributeError, an undefined name -> NameError).
_REJECTED_BY_A_COMPILER = ("NameError", "AttributeError", "TypeError", "SyntaxError", "UnboundLocalError",
                           "ImportError", "NotImplementedError", "CompilationError")


def _is_compile_error(e: BaseException | None) -> bool:
    """The kernel did not compile: Triton's CompilationError (the front end, or a GPU), or the interpreter's
    equivalent."""
    seen, interpreted = set(), False
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        name = type(e).__name__
        if name == "CompilationError" or (interpreted and name in _REJECTED_BY_A_COMPILER):
            return True
        interpreted = interpreted or name == "InterpreterError"
        e = e.__cause__ or e.__context__
    return False
