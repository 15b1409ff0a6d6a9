"""The candidate's host process, in-process: its stand-ins for the inputs, its record of a call's aten ops, and
the checks after each call (no sandbox: the functions the host runs, called directly)."""

import types

import pytest
import torch

from autotune.verify import protocol
from autotune.verify.device.buffers import place
from autotune.verify.host import process as host


def test_a_stand_in_sits_where_the_devices_copy_of_the_input_sits_without_its_values():
    x = torch.randn(6, 10)[:, :7]  # a strided view: placement keeps its strides
    placement = protocol.Placement.of(x, True)
    stand_in = host.case_args(protocol.HostCase(0, 1, [{"place": placement.to_wire()}, 1e-6]))
    assert stand_in[1] == 1e-6
    sent = protocol.check_ref(protocol.ref_of(stand_in[0]))  # what the host names it by on the wire
    placed = place(x, True, 0)
    want = (placed.buffer.nbytes, placement.layout()[1], placement.shape, placement.stride, placement.dtype)
    assert (sent.nbytes, sent.offset, sent.shape, sent.stride, sent.dtype) == want  # the device's own check
    assert stand_in[0].untyped_storage().data_ptr() % 512 == 0  # aligned as CUDA's allocator aligns


def test_a_call_records_its_aten_ops_and_outputs_as_references(monkeypatch):
    from triton.runtime import interpreter

    monkeypatch.setattr(host._calls, "hook", interpreter.InterpretedFunction.run)
    module = types.ModuleType("candidate")
    events: list = []
    outs, ops = host.call(lambda x: torch.empty_like(x), [torch.zeros(2, 3)], module, host._snapshot(module), events)
    assert ops["aten.empty_like"] == 1 and any(e.get("op") == "aten.empty_like" for e in events)
    (out,) = host.output_refs(outs)
    r = protocol.check_ref(out)
    assert r.shape == (2, 3) and r.dtype == "float32"


def test_a_call_that_changes_a_module_level_value_is_tampering(monkeypatch):
    from triton.runtime import interpreter

    monkeypatch.setattr(host._calls, "hook", interpreter.InterpretedFunction.run)
    module = types.ModuleType("candidate")
    module.seen = []
    before = host._snapshot(module)

    def remember(x):
        module.seen.append(x)
        return x + 0

    with pytest.raises(host.Tampered, match="module-level `seen`"):
        host.call(remember, [torch.zeros(2)], module, before, [])


def test_keyword_defaults_and_dicts_that_nobody_changes_are_not_tampering():
    def helper(x, *, scale=None):  # libdevice's interpreted functions take `_semantic=None` so
        return x

    module = types.ModuleType("candidate")
    module.helper, module.table = helper, {"a": (1, 2)}
    assert host._snapshot(module) == host._snapshot(module)
    before = host._snapshot(module)
    helper.__kwdefaults__["scale"] = 2.0
    module.table["b"] = 3
    changed = {k for k in before if before[k] != host._snapshot(module)[k]}
    assert changed == {"helper (default arguments)", "table"}


def test_a_call_that_removes_the_launch_report_is_tampering(monkeypatch):
    monkeypatch.setattr(host._calls, "hook", object())  # not what InterpretedFunction.run is now
    module = types.ModuleType("candidate")
    with pytest.raises(host.Tampered, match="report of its Triton launches"):
        host.call(lambda x: x, [torch.zeros(2)], module, host._snapshot(module), [])
