"""The op table: trace reading, nesting and self time, the GPU kernel join, real vLLM traces, bad traces."""

import gzip
import json
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from autotune.errors import UserError
from autotune.profile.opmap import build_map
from autotune.profile.optable import SERVE_SPAN, coverage, op_table, read_op_table, read_trace, serving_time_us
from autotune.records import Coverage
from autotune.serve import dispatch

FIXTURES = Path(__file__).parent / "fixtures"
OP_MAP = build_map()


def _row(ops, op, shapes):
    rows = ops[(ops["op"] == op) & (ops["input_shapes"] == json.dumps(shapes))]
    assert len(rows) == 1, f"expected one row for {op} {shapes}, got {len(rows)}"
    return rows.iloc[0]


def test_gpu_ops_take_the_time_of_the_kernels_they_and_their_children_launched():
    trace = read_trace(FIXTURES / "kineto_gpu.json")
    ops = op_table(trace, OP_MAP)
    big = _row(ops, "autotune::rms_norm", [[8, 4096], [4096], []])
    # aten::pow's kernel (7) + aten::mean's (9) + the one rms_norm launched itself (4)
    assert big.device_us == 20 and big.total_us == 100 and big.self_us == 50
    assert big["target"] == "rms_norm" and big["dtype"] == "bfloat16" and big.calls == 1
    assert _row(ops, "autotune::rms_norm", [[1, 4096], [4096], []]).device_us == 3
    # the second launch has no External id on its runtime event: the kernel's own joins it
    assert _row(ops, "autotune::silu_and_mul", [[8, 28672]]).device_us == 17
    assert _row(ops, "aten::copy_", [[8], [8], []]).device_us == 2  # a memcpy counts as device time
    assert _row(ops, "aten::mm", [[8, 4096], [4096, 28672]]).device_us == 80
    # the graph-launched kernel (50 us) belongs to no op; the GPU copy of the serve window is not a 2nd window
    assert serving_time_us(trace) == 1000
    assert big.share == pytest.approx(20 / 1000)


def test_real_vllm_eager_trace_maps_rotary_with_its_heads_and_the_unfused_rms_norms():
    # 3 steps of vLLM 0.32's CPU worker (tiny Llama: 4 layers, hidden 256, 8 heads of 32; fixtures/make_slices.py)
    trace = read_trace(FIXTURES / "vllm_eager_worker.json.gz")
    ops = op_table(trace, OP_MAP)
    mapped = ops[ops["target"] != ""]
    calls = mapped.groupby(["target", "case_shape"])["calls"].sum().to_dict()
    # _C::rotary_embedding(positions [T], query [T, 256], key [T, 64], head_size=32, cos_sin_cache [2048, 32],
    # is_neox=True, ...): case (T, 8 heads, 2 kv heads, 32, rot_dim 32, NeoX, 2048 positions), not (T,)
    assert {k: v for k, v in calls.items() if k[0] == "rotary_embedding"} == {
        ("rotary_embedding", f"[{t}, 8, 2, 32, 32, 1, 2048]"): 4 for t in (5, 17, 130)}
    # RMSNorm as plain aten ops: per step the final norm and layer 0's input norm, plus 7 with the residual add
    for t in (5, 17, 130):
        assert calls[("fused_add_rms_norm", f"[{t}, 256]")] == 8 and calls[("rms_norm", f"[{t}, 256]")] == 1
    assert set(mapped["dtype"]) == {"float32"}
    rotary = mapped[(mapped["op"] == "_C::rotary_embedding") & (mapped["case_shape"] == "[17, 8, 2, 32, 32, 1, 2048]")].iloc[0]
    assert json.loads(rotary.input_shapes) == [[17], [17, 256], [17, 64], [], [2048, 32], [], [], []]
    # the sequence's ops are one row each; no aten::pow is left over to count on its own
    assert "aten::pow" not in set(ops["op"]) and (mapped["total_us"] > 0).all()


def test_real_vllm_eager_trace_maps_every_gemm_and_the_unfused_silu_and_mul():
    ops = op_table(read_trace(FIXTURES / "vllm_eager_worker.json.gz"), OP_MAP)
    mapped = ops[ops["target"] != ""]
    gemm = mapped[mapped["op"] == "_C::onednn_mm"]
    # _C::onednn_mm(out [M, N], x [M, K], bias, handler): the weight is in the handler, N is the output's width.
    # Per step and layer: qkv (256 -> 256 + 2 * 64), o, gate_up (256 -> 2 * 688), down; then the LM head (1024)
    cases = {tuple(json.loads(c)[1:]) for c in gemm["case_shape"]}
    assert cases == {(384, 256), (256, 256), (1376, 256), (256, 688), (1024, 256)}
    assert set(gemm["target"]) == {"linear"} and gemm["calls"].sum() == 3 * (4 * 4 + 1)
    # SiLU-and-mul as aten::slice, aten::silu, aten::slice, aten::mul: one row per call, case [T, 2 * 688]
    silu = mapped[mapped["target"] == "silu_and_mul"]
    assert set(silu["op"]) == {"aten::silu+aten::mul"} and silu["calls"].sum() == 3 * 4
    assert set(silu["case_shape"]) == {"[5, 1376]", "[17, 1376]", "[130, 1376]"}
    assert "aten::silu" not in set(ops["op"])
    # the mul of the SiLU pattern is taken; the norms' muls are in theirs; no [T, 688] mul is left alone
    left = ops[ops["op"] == "aten::mul"]["input_shapes"].map(json.loads)
    assert not any(shapes[:1] == [[t, 688]] for shapes in left for t in (5, 17, 130))


def test_real_vllm_irwrap_trace_maps_both_vllm_ir_rms_norms():
    ops = op_table(read_trace(FIXTURES / "vllm_irwrap_worker.json.gz"), OP_MAP)
    mapped = ops[ops["target"] != ""]
    by_op = mapped.groupby(["op", "target"])["calls"].sum().to_dict()
    assert by_op == {("vllm_ir::fused_add_rms_norm", "fused_add_rms_norm"): 24, ("vllm_ir::rms_norm", "rms_norm"): 3,
                     ("_C::rotary_embedding", "rotary_embedding"): 12, ("_C::onednn_mm", "linear"): 51,
                     ("aten::silu+aten::mul", "silu_and_mul"): 12,
                     ("_C::cpu_attention_with_kv_cache", "paged_attention"): 12}  # the CPU build's attention
    assert set(mapped[mapped["target"] == "rms_norm"]["case_shape"]) == {"[5, 256]", "[17, 256]", "[130, 256]"}
    # the aten ops inside vllm_ir::rms_norm are its implementation, not a second, unfused RMSNorm
    assert not ops["op"].str.contains(r"aten::pow\+").any()


def test_unfused_rms_norm_inside_our_own_dispatch_point_is_not_counted_twice(tmp_path):
    x, w = torch.randn(6, 48), torch.ones(48)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with record_function(SERVE_SPAN):
            dispatch.rms_norm(x, w, 1e-5)  # the reference: pow, mean, add, rsqrt, mul, mul inside autotune::rms_norm
            y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w  # the same formula, outside any op
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    ops = op_table(read_trace(tmp_path / "t.json"), OP_MAP)
    rms = ops[ops["target"] == "rms_norm"]
    assert sorted(rms["op"]) == ["aten::pow+aten::mean+aten::add+aten::rsqrt+aten::mul+aten::mul", "autotune::rms_norm"]
    assert set(rms["case_shape"]) == {"[6, 48]"} and y.shape == x.shape


def test_our_rotary_calls_give_the_whole_case_and_the_query_dtype(tmp_path):
    """autotune::rotary_embedding(positions int64, query, key, cos_sin_cache, is_neox): the case from every argument
    and the style, its dtype the query's (not the positions')."""
    from autotune.targets import get

    args = get("rotary_embedding").make_inputs((5, 4, 2, 32, 16, 0, 64), torch.bfloat16, torch.Generator(), "normal")
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with record_function(SERVE_SPAN):
            dispatch.rotary_embedding(*args)
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    ops = op_table(read_trace(tmp_path / "t.json"), OP_MAP)
    rotary = ops[ops["target"] == "rotary_embedding"].iloc[0]
    assert (rotary["case_shape"], rotary["dtype"]) == ("[5, 4, 2, 32, 16, 0, 64]", "bfloat16")


def test_real_trace_of_dispatch_points_gives_shapes_calls_and_self_time(tmp_path):
    x, w, gate_up, scores = torch.randn(5, 96), torch.ones(96), torch.randn(3, 2 * 40), torch.randn(2, 7)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with record_function(SERVE_SPAN):
            for _ in range(4):
                dispatch.rms_norm(x, w, 1e-5)
                dispatch.silu_and_mul(gate_up)
            dispatch.softmax(scores)
    prof.export_chrome_trace(str(tmp_path / "t.json.gz"))
    trace = read_trace(tmp_path / "t.json.gz")
    ops = op_table(trace, OP_MAP)
    assert _row(ops, "autotune::rms_norm", [[5, 96], [96], []]).calls == 4
    assert _row(ops, "autotune::silu_and_mul", [[3, 80]]).calls == 4
    softmax = ops[ops["target"] == "softmax"]
    assert list(softmax["op"]) == ["autotune::softmax"]  # aten::_softmax inside it is not a second hit
    assert (ops["self_us"] <= ops["total_us"] + 1e-6).all() and (ops["self_us"] >= -1e-6).all()
    # self times partition the time of the top-level ops: nothing is lost or counted twice
    top = ops[ops["op"].str.startswith("autotune::")]
    assert ops["self_us"].sum() == pytest.approx(top["total_us"].sum(), rel=1e-6)
    assert 0 < top["share"].sum() <= 1.0 + 1e-9
    assert serving_time_us(trace) >= top["total_us"].sum()


@pytest.mark.parametrize("name", ["ops.csv", "ops.parquet"])
def test_op_table_round_trips_through_csv_and_parquet(tmp_path, name):
    if name.endswith(".parquet"):
        pytest.importorskip("pyarrow")  # parquet is written only when pyarrow is installed (the test extra has it)
    ops = op_table(read_trace(FIXTURES / "vllm_eager_worker.json.gz"), OP_MAP)
    path = tmp_path / name
    ops.to_csv(path, index=False) if name.endswith(".csv") else ops.to_parquet(path, index=False)
    assert read_op_table(path).equals(ops), name


@pytest.mark.parametrize("content, says", [
    (None, "not found"),
    (b"\x1f\x8b\x08\x00garbage", "not a readable gzip file"),
    # mtime=0: the same bytes, so the same test id, in every xdist worker
    (gzip.compress(b'{"traceEvents": [ {"ph": ', mtime=0), "not valid JSON"),
    (b"\xff\xfe not text", "not valid JSON"),
    (json.dumps({"schemaVersion": 1}).encode(), "has no traceEvents"),
    (json.dumps([{"ph": "X"}]).encode(), "has no traceEvents"),
])
def test_missing_or_corrupt_traces_are_one_line_user_errors(tmp_path, content, says):
    path = tmp_path / "trace.json.gz"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(UserError) as e:
        read_trace(path)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_directory_is_not_a_trace(tmp_path):
    with pytest.raises(UserError, match="is a directory"):
        read_trace(tmp_path)


def test_coverage_counts_each_op_once_at_its_outermost_level():
    # GPU: kernel time of the outermost ops (rms_norm 20 + 3, silu_and_mul 17, mm 80, copy_ 2); the graph-launched
    # kernel belongs to no op and is not op time
    gpu = coverage(read_trace(FIXTURES / "kineto_gpu.json"), OP_MAP)
    assert (gpu.ops_us, gpu.covered_us) == (122, 120) and gpu.share == pytest.approx(120 / 122)
    assert gpu.uncovered == (("aten::copy_", 2),)  # aten::mm(x [8, 4096], w [4096, 28672]) is linear's
    # CPU, the real vLLM slice: the GEMMs, the rotary and the pattern-matched RMSNorms and SiLU-and-muls are
    # covered, exactly the op table's mapped rows; attention is not (no target maps it in this test's map)
    trace = read_trace(FIXTURES / "vllm_eager_worker.json.gz")
    cpu, ops = coverage(trace, OP_MAP), op_table(trace, OP_MAP)
    assert cpu.covered_us == pytest.approx(ops.loc[ops["target"] != "", "total_us"].sum())
    assert {"_C::onednn_mm", "aten::silu", "aten::pow"}.isdisjoint(dict(cpu.uncovered))
    assert 0.2 < cpu.share < 1 and "vllm::unified_attention_with_output" in dict(cpu.uncovered)
    assert cpu.ops_us == pytest.approx(cpu.covered_us + sum(us for _, us in cpu.uncovered))
    assert Coverage.from_dict(json.loads(json.dumps(cpu.to_dict()))) == cpu


def test_coverage_of_a_target_inside_another_op_is_taken_out_of_that_op(tmp_path):
    lib = torch.library.Library("coverage_test", "FRAGMENT")  # a real op that calls a dispatch point inside it
    lib.define("outer(Tensor x, Tensor w) -> Tensor")
    lib.impl("outer", lambda x, w: dispatch.rms_norm(torch.cumsum(torch.tanh(x), -1), w, 1e-5),
             "CompositeExplicitAutograd")  # ops no target covers around one a target does
    x, w = torch.randn(64, 96), torch.ones(96)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function(SERVE_SPAN):
            for _ in range(3):
                torch.ops.coverage_test.outer(x, w)
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    trace = read_trace(tmp_path / "t.json")
    cov = coverage(trace, OP_MAP)
    ops = op_table(trace, OP_MAP)
    outer_us = ops.loc[ops["op"] == "coverage_test::outer", "total_us"].sum()
    rms_us = ops.loc[ops["target"] == "rms_norm", "total_us"].sum()
    assert rms_us > 0 and cov.ops_us == pytest.approx(outer_us) and cov.covered_us == pytest.approx(rms_us)
    assert cov.uncovered == (("coverage_test::outer", pytest.approx(outer_us - rms_us)),)
