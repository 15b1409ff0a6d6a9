"""Every frame of the checker's processes, defined once, in four modules:

- `tensors`: how the host names a tensor on the wire (`TensorRef`, trusted only after `check_ref`: a hostile host
  can send anything, and what it sends can only make its own verdict fail) and where each input sits in memory
  (`Placement`: a storage with a guard band of NaN, built identically by the host and the device).
- `records`: a typed record whose fields carry their wire specs (autotune.sandbox.schema).
- `frames`: the device's frames to the judge (`Frame` records: the device sends `record.wire()`, the judge's
  reader checks the dict against `record_type.schema()` before reading it back with `parse`).
- `messages`: the host's frames to the device, the device's to the host and the judge's stream to the device
  (`Message` records, each read through one validating function: `parse_host_frame`, `parse_to_host`,
  `parse_stream`).

A field with a default may be left out; nothing else may be.
"""

from autotune.sandbox.schema import ProtocolError
from autotune.verify.protocol.frames import (
    AuditLog,
    CallOutcome,
    CaseError,
    CaseEvidence,
    CaseStart,
    CompileError,
    Coverage,
    DryUncovered,
    Frame,
    HostGone,
    HostIsolation,
    HostProtocol,
    ImportOps,
    PolicyError,
    SetupError,
    device_schemas,
    parse,
)
from autotune.verify.protocol.messages import (
    HOST_TEXT,
    MAX_EVENTS_PER_CALL,
    Call,
    CaseItem,
    CoverageCheck,
    DryItem,
    End,
    HostAuditLog,
    HostCase,
    HostCaseError,
    HostCompileError,
    HostDone,
    HostError,
    HostFailure,
    HostImportOps,
    HostResult,
    Isolation,
    Message,
    parse_host_frame,
    parse_stream,
    parse_to_host,
)
from autotune.verify.protocol.tensors import (
    DTYPES,
    MAX_GRID,
    Placement,
    TensorRef,
    check_ref,
    encode,
    is_ref,
    read,
    ref_of,
    same_bits,
    scalar_ok,
)

__all__ = [
    "DTYPES", "AuditLog", "Call", "CallOutcome", "CaseError", "CaseEvidence", "CaseItem", "CaseStart", "CompileError",
    "Coverage", "CoverageCheck", "DryItem", "DryUncovered", "End", "Frame", "HOST_TEXT", "HostAuditLog",
    "HostCase", "HostCaseError", "HostCompileError", "HostDone", "HostError", "HostFailure", "HostGone",
    "HostImportOps", "HostIsolation", "HostProtocol", "HostResult", "ImportOps", "Isolation", "MAX_EVENTS_PER_CALL",
    "MAX_GRID", "Message", "Placement", "PolicyError", "ProtocolError", "SetupError", "TensorRef", "check_ref",
    "device_schemas", "encode", "is_ref", "parse", "parse_host_frame", "parse_stream", "parse_to_host", "read",
    "ref_of", "same_bits", "scalar_ok",
]
