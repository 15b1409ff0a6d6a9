"""Every frame between the checker's processes is a typed record defined once (autotune/verify/protocol.py): the
judge's reader checks each device frame against the schema derived from its record, through the sandbox's
channel, before the judge reads it back as the record."""

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
