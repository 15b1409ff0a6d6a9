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
from autotune.verify.device.loader import KernelSourceError, load
from autotune.verify.device.replay import Device
from autotune.verify.interp import bounds
from autotune.verify.interp.launch import caused_by
from autotune.verify.interp.races import race_in

HOST_FRAME_BYTES = 64 << 20  # a call's events and references: a few KB; a compile error's traceback: a few KB
TEXT_LIMIT = 4000  # characters of a host's error text passed on to the judge


def _text(value) -> str:
    return str(value)[-TEXT_LIMIT:] if value is not None else ""


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
        kernels = load(payload["source"], Path.cwd() / "kernels.py")
    except (KernelSourceError, SyntaxError) as e:
        protocol.PolicyError(f"{e}").send(send)
        return {"cases_run": 0}
    except Exception as e:  # noqa: BLE001 - untrusted code's failure, of any kind, is reported, never raised here
        protocol.CompileError(trim_traceback(e)).send(send)
        return {"cases_run": 0}
    device = Device(kernels, send, on_gpu=not dev.interprets_triton)
    done = 0
    while (frame := links.receive()) is not None:
        if "coverage_check" in frame:  # every case before it is done: which dry calls made a launch none ran
            device.account.dry_uncovered().send(send)
            continue
        item = frame.get("case") or frame.get("dry")
        if "case" in frame:
            device.cases = {item["index"]: item}
        if not _tell_host(links, {"kind": "case", **item["host"]}):
            follow(device, links.from_host, send)  # the host is gone: what it said last says why
            return {"cases_run": done}
        ended = follow(device, links.from_host, send)
        if ended != "case":
            return {"cases_run": done}
        done += "case" in frame
    _tell_host(links, {"kind": "end"})
    follow(device, links.from_host, send)
    return {"cases_run": done}


def _tell_host(links, msg: dict) -> bool:
    """Hand the host a message; False when it is gone."""
    try:
        write_all(links.to_host, protocol.encode(msg))
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
            protocol.CaseError(device.case["index"] if device.case else None, str(e), refused=True).send(send)
            return "stop"
        except BaseException as e:  # noqa: BLE001 - untrusted code's failure, of any kind, is reported, never raised here
            protocol.CaseError(device.case["index"] if device.case else None,
                               trim_traceback(e, keep_files=("kernels.py",)), compile=_is_compile_error(e),
                               out_of_bounds=caused_by(e, bounds.OutOfBounds), race=race_in(e)).send(send)
            return "stop"
        if ended:
            return ended


def _on_host_frame(device: Device, msg: dict, send) -> str:
    """One frame of the host's, relayed (bounded) or repeated; what it ended ('' for nothing)."""
    kind = msg.get("kind")
    if kind == "call":
        return "case" if device.on_call(msg) else ""
    if kind == "isolation":
        report = msg["report"] if isinstance(msg.get("report"), dict) else {}
        protocol.HostIsolation({str(k)[:40]: _text(v)[:300] for k, v in list(report.items())[:20]}).send(send)
    elif kind == "import_ops":
        device.account.configs = _configs(msg.get("autotune"))
        ops = msg["torch_ops"] if isinstance(msg.get("torch_ops"), dict) else {}
        protocol.ImportOps({str(k)[:120]: v for k, v in list(ops.items())[:200] if type(v) is int}).send(send)
    elif kind in ("compile_error", "case_error", "error"):
        index = msg.get("index")
        if type(index) is int and index in device.cases and not msg.get("dry") and (
                device.case is None or device.case["index"] != index):
            protocol.CaseStart(index).send(send)  # the host failed before its first report of the case
        if kind == "compile_error":
            protocol.CompileError(_text(msg.get("error"))).send(send)
        else:
            protocol.CaseError(index if type(index) is int else None, _text(msg.get("error")), dry=bool(msg.get("dry")),
                               tampered=bool(msg.get("tampered"))).send(send)
        return "stop"
    elif kind == "host_done":
        device.account.report().send(send)
        return "done"
    elif kind == "audit_log":
        protocol.AuditLog([_text(d)[:200] for d in (msg.get("denied") or [])[:200]]).send(send)
    elif kind != "result":
        raise protocol.ProtocolError(f"an unknown frame kind {str(kind)[:40]!r}")
    return ""


def _configs(value) -> dict[str, list[dict]]:
    if not isinstance(value, dict):
        return {}
    return {str(k)[:100]: [c for c in v[:256] if isinstance(c, dict)] for k, v in list(value.items())[:64]
            if isinstance(v, list)}


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
