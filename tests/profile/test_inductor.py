"""Issue 26 item 7: a profile of vLLM served compiled (its default torch.compile) ranks Inductor's generated kernels by
the targets they compute. The fixture is a slice of a real trace (vLLM 0.32's CPU build, the tiny Llama of
../shared/traces, `cpp.enable_kernel_profile` on: tests/profile/fixtures/make_slices.py)."""

import json
from pathlib import Path

import pytest

from autotune.profile import diagnose, inductor
from autotune.profile.opmap import declared_map
from autotune.profile.optable import coverage, op_table, read_trace

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("name, target", [
    # the CPU build's, as recorded
    ("graph_0_cpp_fused_add_mean_mul_onednn_mm_pow_rsqrt_6", "fused_add_rms_norm"),
    ("graph_0_cpp_fused__to_copy_add_embedding_mean_mul_onednn_mm_pow_rsqrt_0", "fused_add_rms_norm"),
    ("graph_0_cpp_fused_mul_onednn_mm_silu_slice_3", "silu_and_mul"),
    ("graph_0_cpp_fused_add_index_select_mul_split_split_with_sizes_sub_unsqueeze_view_1", "rotary_embedding"),
    # Inductor's names for the same fusions on a GPU (triton_<kind>_fused_<ops>_<n>)
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_2", "fused_add_rms_norm"),
    ("triton_poi_fused_mul_silu_4", "silu_and_mul"),
    ("triton_per_fused__softmax_0", "softmax"),
    ("triton_red_fused_amax_div_exp_sub_sum_1", "softmax"),
    # kernels of no target, and ops that are not Inductor's
    ("graph_0_cpp_fused_add_1", None), ("triton_poi_fused_cat_index_put_7", None), ("aten::mul", None),
    ("cpp_fused_mean", None), ("triton_poi_fused_mul_sub_0", None),  # a multiply and a subtract are not a rotary
])
def test_inductor_kernels_map_by_the_ops_they_fuse(name, target):
    assert inductor.target_of(name) == target


def test_the_compiled_vllm_trace_ranks_its_fused_kernels_with_cases_from_the_gemms_beside_them():
    trace = read_trace(FIXTURES / "vllm_compiled_worker.json.gz")
    ops = op_table(trace, declared_map())
    mapped = ops[ops["target"] != ""]
    calls = mapped.groupby(["target", "case_shape", "dtype"])["calls"].sum().to_dict()
    # 3 steps of 17, 130 and 5 tokens; per step 9 norms (2 a layer of 4, and the final one: the first behind the
    # embedding takes its case from the qkv GEMM it feeds), 4 SiLU-and-muls (the gate_up GEMM's [T, 2I])
    for t in (17, 130, 5):
        assert calls[("fused_add_rms_norm", f"[{t}, 256]", "float32")] == 9
        assert calls[("silu_and_mul", f"[{t}, 1376]", "float32")] == 4
    # rotary's heads are in no neighbour's shape: its 12 calls count, with no case
    assert calls[("rotary_embedding", "", "")] == 12
    assert {t for t, *_ in calls} == {"fused_add_rms_norm", "silu_and_mul", "rotary_embedding", "linear",
                                      "paged_attention"}
    cover = coverage(trace, declared_map())
    assert not any("cpp_fused" in op for op, _ in cover.uncovered)  # every generated kernel is a target's
    assert cover.covered_us == pytest.approx(mapped["total_us"].sum())


def test_a_profile_says_which_configuration_it_measured():
    compiled = read_trace(FIXTURES / "vllm_compiled_worker.json.gz")
    assert diagnose.configuration(compiled) == "compiled"
    assert diagnose.configuration(read_trace(FIXTURES / "vllm_eager_worker.json.gz")) == "eager"
    assert any("compiled configuration" in n and "Inductor kernel" in n for n in diagnose.notes(compiled))
    # compiled regions whose kernels were not recorded: the note says how to see them
    hidden = diagnose.notes(read_trace(FIXTURES / "torch_compiled.json.gz"))
    assert any("--enforce-eager" in n for n in hidden) and diagnose.inductor_kernels(compiled) > 0


def test_hotspots_json_keeps_the_configuration(tmp_path, capsys):
    from autotune import cli

    code = cli.main(["profile", f"trace={FIXTURES / 'vllm_compiled_worker.json.gz'}", f"profile.out_dir={tmp_path}"])
    out, _ = capsys.readouterr()
    assert code == 0 and "compiled configuration" in out
    (run,) = list(tmp_path.iterdir())
    record = json.loads((run / "hotspots.json").read_text())
    assert record["configuration"] == "compiled"
    assert {h["target"] for h in record["hotspots"]} >= {"fused_add_rms_norm", "silu_and_mul", "rotary_embedding"}
