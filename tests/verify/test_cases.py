"""The case plan: shapes from the profile or the defaults plus edges, every dtype, cuts on CPU only."""

import torch

from autotune.config import compose
from autotune.targets import get
from autotune.verify.cases import cut_note, cut_rows, make_data, plan

CFG = compose([]).verify
RMS = get("rms_norm")


def test_cut_rows_shrinks_leading_dims_only():
    assert cut_rows((1024, 64), 256) == (256, 64)
    assert cut_rows((256, 32, 128), 256) == (8, 32, 128)
    assert cut_rows((3, 5120), 256) == (3, 5120)
    assert cut_rows((256, 28672), 256, 262144) == (9, 28672)
    assert cut_rows((1, 100000), 256, 10) == (1, 100000)
    assert cut_rows((4096, 4096), None) == (4096, 4096)


def test_cpu_plan_covers_every_shape_dtype_and_kind():
    cases = plan(RMS, None, CFG, on_gpu=False)
    wanted = {cut_rows(s, 256, 262144) for s in RMS.default_shapes + RMS.edge_shapes}
    assert {c.shape for c in cases if c.kind == "normal" and c.seed == 0} == wanted  # [256, 4096] became [64, 4096]
    for shape in {c.requested_shape for c in cases}:
        mine = [c for c in cases if c.requested_shape == shape]
        assert {c.dtype for c in mine if c.kind == "normal"} == {torch.float32, torch.bfloat16, torch.float16}
        assert {c.dtype for c in mine if c.kind == "large"} == {torch.bfloat16, torch.float16}
        assert len({c.kind for c in mine}) == 3 and {c.seed for c in mine} == {0, 1}
        assert sum(c.refill and c.repeat for c in mine) == 1  # rotating over the dtypes
    assert [c.index for c in cases] == list(range(len(cases)))
    assert all(c.shape[0] <= 256 for c in cases)
    sizes = [c.shape[0] * c.shape[-1] for c in cases]
    assert sizes == sorted(sizes)  # cheapest first


def test_gpu_plan_cuts_nothing_and_checks_everything():
    cases = plan(RMS, None, CFG, on_gpu=True)
    assert {c.shape for c in cases} == set(RMS.default_shapes) | set(RMS.edge_shapes)
    assert all(c.repeat and c.refill for c in cases if c.kind == "normal" and c.seed == 0)
    assert cut_note(RMS, None, CFG, on_gpu=True) == ""


def test_profile_shapes_replace_the_defaults_and_keep_their_calls():
    cases = plan(RMS, [((2048, 4096), "bfloat16", 640)], CFG, on_gpu=False)
    profiled = [c for c in cases if c.source == "profile"]
    assert profiled and all(c.calls == 640 and c.requested_shape == (2048, 4096) for c in profiled)
    assert not any(c.source == "default" for c in cases)
    assert "[2048, 4096] -> [64, 4096]" in cut_note(RMS, [((2048, 4096), "bfloat16", 640)], CFG, on_gpu=False)


def test_inputs_are_reproducible_and_refills_differ():
    case = next(c for c in plan(RMS, None, CFG, on_gpu=False) if c.refill)
    a, b = make_data(RMS, case), make_data(RMS, case)
    assert torch.equal(a.args[0], b.args[0]) and torch.equal(a.reference[0], b.reference[0])
    assert not torch.equal(a.args[0], a.refill_args[0])
    assert a.golden[0].dtype == torch.float64


def test_every_target_makes_data_for_every_planned_case_kind():
    for name in ("silu_and_mul", "fused_add_rms_norm", "rotary_embedding", "softmax"):
        target = get(name)
        cases = plan(target, None, CFG, on_gpu=False)
        for case in {(c.kind, c.dtype): c for c in cases if c.shape == cases[0].shape}.values():
            data = make_data(target, case)
            assert all(r.dtype == case.dtype for r in data.reference)
            assert all(g.dtype == torch.float64 for g in data.golden)


def test_profile_shapes_are_capped_to_the_extremes_and_the_most_called():
    from autotune.profile.records import ProfiledShape
    from autotune.verify.cases import select_profile_shapes, selection_note

    calls = {1: 50, 2: 40, 3: 30, 7: 9, 9: 8, 11: 7, 13: 6, 17: 1, 64: 5, 100: 2}
    shapes = [ProfiledShape((rows, 128), "float32", c) for rows, c in calls.items()]
    chosen = select_profile_shapes(shapes, 4)
    assert [s.shape[0] for s in chosen] == [1, 2, 3, 100]  # smallest and largest, then the most called
    assert select_profile_shapes(shapes, 0) == shapes and select_profile_shapes(shapes, 10) == shapes
    note = selection_note(shapes, 4)
    assert "4 of 10" in note and f"{(50 + 40 + 30 + 2) / 158:.0%}" in note
    assert selection_note(shapes, 10) == ""
