"""Every frame between the checker's processes is a typed record defined once (autotune/verify/protocol.py): the
judge's reader checks each device frame against the schema derived from its record, through the sandbox's
channel, before the judge reads it back as the record."""

import pickle

import pytest
import torch

from autotune.sandbox.channel import decode, encode
from autotune.sandbox.schema import ProtocolError
from autotune.verify import protocol

SCHEMAS = {s.kind: s for s in protocol.device_schemas()}


def through_the_channel(frame: protocol.Frame) -> protocol.Frame | None:
    data = encode({"kind": frame.kind, **frame.wire()})
    return protocol.parse(decode(data[8:], SCHEMAS))


def evidence(**changed) -> protocol.CaseEvidence:
    call = protocol.CallOutcome([torch.ones(2, 3)], [torch.zeros(2, 3), None])
    fields = dict(index=3, first=call, output_types=["Tensor"], launches=[1, 1], output_strides=[[3, 1]],
                  aliased=[], reused=[], clobbered=False, guards_broken=[], torch_ops={"aten.empty": 2},
                  long_calls=0, long_differs=None, repeat=call)
    return protocol.CaseEvidence(**{**fields, **changed})


def test_every_device_frame_round_trips_as_its_record():
    frames = [protocol.CaseStart(4), protocol.CompileError("NameError: x"), protocol.HostGone(),
              protocol.CaseError(None, "boom", compile=True, race="programs 1 and 2 wrote one address"),
              protocol.Coverage([{"dry_index": 0, "signature": "k[1-D grid]()"}], [], 3), protocol.DryUncovered([1]),
              protocol.ImportOps({"aten.add": 1}), protocol.HostIsolation({"uid": "65534"})]
    for frame in frames:
        assert through_the_channel(frame) == frame, frame.kind
    ev = through_the_channel(evidence())
    assert isinstance(ev, protocol.CaseEvidence) and ev.refill is None and ev.sampled is None
    assert torch.equal(ev.repeat.outputs[0], torch.ones(2, 3)) and ev.first.inputs_after[1] is None


def test_a_frame_that_does_not_fit_its_record_is_a_protocol_error():
    good = {"kind": "case_result", **evidence().wire()}
    SCHEMAS["case_result"].check(good)
    for bad in ({**good, "aliased": [[0, 1, 2]]},  # a pair of three
                {k: v for k, v in good.items() if k != "launches"},  # a field left out
                {**good, "outputs": [torch.ones(1)]},  # a field no record has (the old flat frame)
                {**good, "first": {"outputs": []}},  # a call without its inputs
                {**good, "index": -1}):
        with pytest.raises(ProtocolError):
            SCHEMAS["case_result"].check(bad)


def test_an_error_text_is_cut_to_its_bound_and_flags_default_to_false():
    frame = SCHEMAS["case_error"].check({"kind": "case_error", "index": 0, "error": "x" * 10_000})
    record = protocol.parse(frame)
    assert isinstance(record, protocol.CaseError) and not (record.compile or record.tampered or record.dry)
    assert len(record.error) < 4100 and record.error.endswith("[truncated]")


def test_the_runners_own_kinds_are_not_device_records():
    assert protocol.parse({"kind": "isolation", "report": {}}) is None


# ------------------------------------------------- host -> device, device -> host, judge -> device

def through_json(msg: protocol.Message) -> dict:
    """A message's wire form as the other process reads it (the channel's JSON frames)."""
    import os

    r, w = os.pipe()
    try:
        os.write(w, protocol.encode(msg.to_wire()))
        return protocol.read(r, limit=1 << 20)
    finally:
        os.close(r)
        os.close(w)


def host_frames() -> list[protocol.Message]:
    ref = protocol.TensorRef(4096, 128, 0, (4, 8), (8, 1), "float32").to_wire()
    return [protocol.Call(0, 1, [{"launch": "k", "args": [ref], "kwargs": {}, "grid": [1]}], inputs=[ref, None],
                          outputs=[ref, {"type": "int"}], torch_ops={"aten.empty": 1}),
            protocol.Call(2, 0, [], inputs=[], outputs=[], torch_ops={}, dry=True),
            protocol.Isolation({"uid": "65534", "processes": "applied"}),
            protocol.HostImportOps({"aten.add": 2}, {"k": [{"kwargs": {"BLOCK": 64}, "num_warps": 4}]}),
            protocol.HostCompileError("NameError: x"), protocol.HostCaseError("boom", index=3, tampered=True),
            protocol.HostError("KeyError"), protocol.HostDone(), protocol.HostAuditLog(["open /etc/passwd"]),
            protocol.HostResult()]


def test_every_host_frame_round_trips_as_its_record():
    for msg in host_frames():
        assert protocol.parse_host_frame(through_json(msg)) == msg, msg.kind


def test_every_frame_to_the_host_and_from_the_judge_round_trips_as_its_record():
    host = protocol.HostCase(5, 3, [{"place": protocol.Placement.of(torch.ones(2, 3), True).to_wire()}, 1e-6])
    for msg in (host, protocol.End(), protocol.HostCase(1, 1, [], dry=True)):
        assert protocol.parse_to_host(through_json(msg)) == msg
    case = protocol.CaseItem(5, [torch.ones(2, 3), 1e-6], True, ["first", "repeat"], 4, host, long=2, sample=0,
                             mutates=[0], refill_args=None)
    wired = case.to_wire()
    assert set(wired) == {"case"} and "refill_args" not in wired["case"] and wired["case"]["host"]["index"] == 5
    back = protocol.parse_stream(pickle.loads(pickle.dumps(wired)))
    assert isinstance(back, protocol.CaseItem) and back.host == host and back.sequence == ["first", "repeat"]
    assert torch.equal(back.args[0], torch.ones(2, 3)) and back.refill_args is None and back.long == 2
    for msg in (protocol.DryItem(0, protocol.HostCase(0, 1, [2], dry=True)), protocol.CoverageCheck()):
        assert protocol.parse_stream(pickle.loads(pickle.dumps(msg.to_wire()))) == msg
    assert protocol.CoverageCheck().to_wire() == {"coverage_check": {}}


def test_a_hosts_texts_and_reports_are_cut_to_their_bounds_as_before():
    err = protocol.parse_host_frame({"kind": "case_error", "index": True, "error": "x" * 9000 + "END", "dry": 1})
    assert isinstance(err, protocol.HostCaseError) and err.index is None and err.dry  # a bool is no index
    assert len(err.error) == protocol.HOST_TEXT and err.error.endswith("END")  # the traceback's tail is kept
    iso = protocol.parse_host_frame({"kind": "isolation", "report": {f"k{i}" * 30: "v" * 999 for i in range(50)}})
    assert len(iso.report) == 20 and all(len(k) <= 40 and len(v) == 300 for k, v in iso.report.items())
    assert protocol.parse_host_frame({"kind": "isolation", "report": 3}).report == {}
    ops = protocol.parse_host_frame({"kind": "import_ops", "torch_ops": {f"op{i}": i for i in range(500)} | {"x": 1.5},
                                     "autotune": {"k": [{"a": 1}, 3] * 200, "j": "no"}})
    assert len(ops.torch_ops) == 200 and "x" not in ops.torch_ops
    assert list(ops.autotune) == ["k"] and len(ops.autotune["k"]) == 128  # 256 items, the dicts of them
    log = protocol.parse_host_frame({"kind": "audit_log", "denied": ["y" * 999] * 500})
    assert len(log.denied) == 200 and all(len(d) == 200 for d in log.denied)
    assert protocol.parse_host_frame({"kind": "audit_log"}).denied == []


@pytest.mark.parametrize("frame", [
    "call",  # not a record
    ["kind", "call"],
    {"index": 0},  # no kind
    {"kind": "launch"},  # an unknown kind
    {"kind": ["call"]},
    {"kind": "case_result"},  # a device frame's kind is not a host frame's
    {"kind": "call", "call": 0, "events": []},  # without its index
    {"kind": "call", "index": "0", "call": 0, "events": []},  # an index that is not an int
    {"kind": "call", "index": True, "call": 0, "events": []},
    {"kind": "call", "index": 0, "call": -1, "events": []},  # out of bounds
    {"kind": "call", "index": 0, "call": 0, "events": {}},  # events not a list
    {"kind": "call", "index": 0, "call": 0, "events": [{}] * (protocol.MAX_EVENTS_PER_CALL + 1)},  # too many
    {"kind": "audit_log", "denied": "abc"},
])
def test_a_malformed_or_unknown_host_frame_is_a_protocol_error(frame):
    with pytest.raises(ProtocolError):
        protocol.parse_host_frame(frame)


@pytest.mark.parametrize("parse, frame", [
    (protocol.parse_to_host, {"kind": "case", "index": 0, "calls": 1}),  # without its args
    (protocol.parse_to_host, {"kind": "case", "index": 0, "calls": 1, "args": [0] * 65}),  # too many
    (protocol.parse_to_host, {"kind": "case", "index": 0, "calls": 1.0, "args": []}),
    (protocol.parse_to_host, {"kind": "stop"}),
    (protocol.parse_stream, {"case": {"index": 0}}),  # without its fields
    (protocol.parse_stream, {"dry": {"index": 0, "host": None}}),
    (protocol.parse_stream, {"dry": {"index": 0, "host": {"index": 0, "calls": 1, "args": [], "x": 1}}} | {"y": {}}),
    (protocol.parse_stream, {"coverage_check": []}),
    (protocol.parse_stream, {"cases": {}}),
    (protocol.parse_stream, {"case": {"index": 0, "args": [], "front_guard": True, "sequence": ["first"] * 17,
                                      "calls": 1, "host": {"index": 0, "calls": 1, "args": []}}}),
])
def test_a_malformed_frame_to_the_host_or_from_the_judge_is_a_protocol_error(parse, frame):
    with pytest.raises(ProtocolError):
        parse(frame)
