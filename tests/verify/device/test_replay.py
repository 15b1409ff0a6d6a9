"""The device process's replay of the host's calls, in-process: no sandbox, no host, a case's frames handed to
`Device.on_call` as the host would send them and the device's frames to the judge collected."""

import pytest
import torch

from autotune.verify import protocol
from autotune.verify.device.buffers import Buffers, Refused, place
from autotune.verify.device.evidence import aliased, reused, trace
from autotune.verify.device.replay import Device
from autotune.verify.protocol import Placement, ProtocolError, TensorRef


class NoKernels:
    interpreted: dict = {}
    compiled: dict = {}
    constexpr_args: dict = {}


def ref(ptr: int, shape=(4, 8), nbytes=None, offset=0) -> dict:
    nbytes = nbytes if nbytes is not None else 4 * shape[0] * shape[1]
    return TensorRef(ptr, nbytes, offset, tuple(shape), (shape[1], 1), "float32").to_wire()


def input_ref(x: torch.Tensor, ptr: int = 0x1000) -> dict:
    """Where the host's stand-in for `x` sits: the storage and offset the judge's placement gives it."""
    total, offset = Placement.of(x, True).layout()
    return TensorRef(ptr, total * x.element_size(), offset, tuple(x.shape), tuple(x.stride()), "float32").to_wire()


def a_case(x: torch.Tensor, calls: int = 1) -> protocol.CaseItem:
    return protocol.CaseItem(0, [x], True, ["first", "repeat"][:calls], calls, protocol.HostCase(0, calls, []))


def a_call(**frame) -> protocol.Call:
    """A host's call frame as the device reads it (protocol.parse_host_frame)."""
    return protocol.parse_host_frame({"kind": "call", **frame})


def a_device():
    sent: list[tuple[str, dict]] = []
    device = Device(NoKernels(), lambda kind, **fields: sent.append((kind, fields)), on_gpu=True)  # no front end
    return device, sent


def test_a_call_is_replayed_on_the_data_and_its_evidence_sent_as_one_typed_frame():
    x = torch.randn(4, 8)
    device, sent = a_device()
    device.cases = {0: a_case(x)}
    out = ref(0x9000)
    call = a_call(index=0, call=0, inputs=[input_ref(x)], outputs=[out], torch_ops={},
                  events=[{"op": "aten.zeros", "args": [], "out": out}])
    assert device.on_call(call)  # the case's only call: finished
    assert [kind for kind, _ in sent] == ["case_start", "case_result"]
    frame = protocol.CaseEvidence.schema().check({"kind": "case_result", **sent[1][1]})  # what the judge checks
    ev = protocol.parse(frame)
    assert isinstance(ev, protocol.CaseEvidence) and ev.index == 0 and ev.repeat is None
    assert torch.equal(ev.first.outputs[0], torch.zeros(4, 8))  # the zero fill, repeated on the device's buffer
    # a read-only input stays on the device: compared there, bitwise, with what the case sent
    assert ev.first.inputs_after == [None] and ev.first.inputs_changed == []
    assert ev.launches == [0] and ev.aliased == [] and ev.guards_broken == [] and not ev.clobbered


def test_calls_out_of_order_or_inputs_not_where_the_case_put_them_break_the_protocol():
    x = torch.randn(4, 8)
    device, _ = a_device()
    device.cases = {0: a_case(x, calls=2)}
    with pytest.raises(ProtocolError, match="out of order"):
        device.on_call(a_call(index=0, call=1, events=[], outputs=[]))
    moved = input_ref(x)
    moved["ref"][2] += 1  # one element further into its storage than the placement puts it
    with pytest.raises(ProtocolError, match="not where the case put it"):
        device.on_call(a_call(index=0, call=0, inputs=[moved], events=[], outputs=[]))


def test_a_torch_op_that_is_not_a_data_move_is_not_run_its_result_is_unwritten_memory():
    x = torch.randn(4, 8)
    device, sent = a_device()
    device.cases = {0: a_case(x)}
    out = ref(0x9000)
    device.on_call(a_call(index=0, call=0, inputs=[input_ref(x)], outputs=[out], torch_ops={"aten.rsqrt": 1},
                          events=[{"op": "aten.rsqrt", "args": [input_ref(x)], "out": out}]))
    ev = protocol.parse({"kind": "case_result", **sent[-1][1]})
    assert ev.first.outputs[0].isnan().all()  # fresh memory under deterministic mode: NaN, never the rsqrt
    assert ev.torch_ops == {"aten.rsqrt": 1}  # for the judge's run-time policy



def test_a_call_that_changes_a_read_only_input_is_named_by_the_input_and_the_input_is_not_sent_back():
    x = torch.randn(4, 8)
    device, sent = a_device()
    device.cases = {0: a_case(x, calls=2)}
    out = ref(0x9000)
    device.on_call(a_call(index=0, call=0, inputs=[input_ref(x)], outputs=[out], torch_ops={},
                          events=[{"op": "aten.zeros", "args": [], "out": out}]))
    out2 = ref(0xA000)
    device.on_call(a_call(index=0, call=1, inputs=[input_ref(x)], outputs=[out2], torch_ops={},
                          events=[{"op": "aten.zeros", "args": [], "out": out2},
                                  {"op": "aten.zero_", "args": [input_ref(x)], "out": None}]))
    ev = protocol.parse({"kind": "case_result", **sent[-1][1]})
    assert ev.first.inputs_changed == [] and ev.repeat.inputs_changed == [0]  # the second call zeroed x
    assert ev.repeat.inputs_after == [None]

def test_a_storage_kept_from_an_earlier_call_is_refused():
    buffers = Buffers()
    buffers.now = ("call", 0, 0)
    kept = ref(0x5000)
    buffers.view(kept, fresh=True)
    buffers.now = ("call", 0, 1)
    with pytest.raises(Refused, match="kept from an earlier call"):
        buffers.view(kept)


def test_an_input_is_placed_aligned_inside_nan_guard_bands_that_show_a_stray_write():
    x = torch.randn(3, 5)
    p = place(x, front=True, case=0)
    assert torch.equal(p.inner, x) and p.intact()
    assert p.buffer.start % 512 == 0 and p.inner.storage_offset() > 0  # a guard band in front
    flat = p.buffer.raw[p.buffer.shift:p.buffer.shift + p.buffer.nbytes].view(torch.float32)
    flat[0] = 1.0
    assert not p.intact()


def test_outputs_aliasing_inputs_or_reusing_kept_storage_are_named_and_traces_ignore_addresses():
    x = torch.randn(4, 8)
    p = place(x, front=False, case=0)
    assert aliased([p.inner[1:]], [p]) == [[0, 0]]
    kept: list = []
    out = torch.empty(4, 8)
    assert reused([out], 0, kept) == [] and reused([out], 1, kept) == [[1, 0]]
    events = [{"op": "aten.zeros", "args": [], "out": ref(0x9000)}]
    moved = [{"op": "aten.zeros", "args": [], "out": ref(0x7000)}]  # the same call, another address
    assert trace(events, [ref(0x9000)], []) == trace(moved, [ref(0x7000)], [])
