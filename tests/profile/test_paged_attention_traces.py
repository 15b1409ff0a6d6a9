"""The paged-attention target on real vLLM 0.32 CPU traces (../shared/traces/vllm-0.32-cpu/, made by the recipe
in its README): `_C::cpu_attention_with_kv_cache` maps to paged_attention with the case its arguments give."""

import json
from pathlib import Path

import pytest

from autotune.profile.optable import op_table, read_trace
from autotune.targets import get

REPO = Path(__file__).resolve().parents[2]
# shared/ sits beside the checkout (CI, /work/main); a worktree is one folder further down (/work/wt/NAME)
TRACES = next((p / "shared" / "traces" / "vllm-0.32-cpu" for p in (REPO.parent, REPO.parent.parent)
               if (p / "shared" / "traces" / "vllm-0.32-cpu").is_dir()), REPO.parent / "shared" / "traces" / "vllm-0.32-cpu")


@pytest.fixture(scope="module")
def table():
    path = TRACES / "eager-worker.pt.trace.json.gz"
    if not path.is_file():
        pytest.skip(f"no real vLLM trace at {path} (the shared traces sit beside the checkout)")
    return op_table(read_trace(path))


def test_vllm_cpu_attention_maps_to_paged_attention_with_its_shapes(table):
    rows = table[table.op == "_C::cpu_attention_with_kv_cache"]
    assert set(rows.target) == {"paged_attention"} and rows.calls.sum() == 136  # 34 steps x 4 layers
    cases = {tuple(json.loads(c)) for c in rows.case_shape}
    # (seqs, heads, kv_heads, head_dim, block_size, longest query, context reach): the tiny Llama's 8 heads over
    # 2 kv heads of 32, vLLM's CPU cache of 128-token blocks, 4 blocks per sequence (max-model-len 512)
    assert (5, 8, 2, 32, 128, 1, 512) in cases  # 5 decodes
    assert (1, 8, 2, 32, 128, 17, 512) in cases  # a lone 17-token prefill
    assert all(c[1:5] == (8, 2, 32, 128) and c[6] == 512 for c in cases)
    assert set(rows.dtype) == {"float32"}
    # the wrapper stays its own row: its time beyond the attention is vLLM's Python around it
    wrapper = table[table.op == "vllm::unified_attention_with_output"]
    assert set(wrapper.target) == {""} and wrapper.total_us.sum() > rows.total_us.sum()


def test_the_mapped_cases_run_through_the_target():
    t = get("paged_attention")
    shape = (5, 8, 2, 32, 128, 1, 512)
    assert t.cut_shape(shape, 256, 262144) == (2, 8, 2, 32, 128, 1, 512)  # only sequences are cut
    import torch

    args = t.make_inputs(shape, torch.float32, torch.Generator().manual_seed(0), "normal")
    assert args[0].shape == (5, 8, 32) and args[1].shape[1:] == (128, 2, 32) and int(args[4].max()) == 512
    assert t.reference(*args).shape == (5, 8, 32)


@pytest.mark.parametrize("dims, case", [
    # SGLang decode_attention_cpu(q, k_buffer, v_buffer, o, k, v, loc, attn_logits, req_to_token, req_pool_indices,
    # seq_lens, sm_scale, logit_cap): one token per page
    ([[4, 8, 64], [9000, 2, 64], [9000, 2, 64], [4, 8, 64], [4, 2, 64], [4, 2, 64], [4], [4, 8, 8, 65], [16, 2048],
      [4], [4], [], []], (4, 8, 2, 64, 1, 1, 2048)),
    # SGLang extend_attention_cpu(q, k, v, o, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens, ...)
    ([[40, 8, 64], [40, 2, 64], [40, 2, 64], [40, 8, 64], [9000, 2, 64], [9000, 2, 64], [16, 2048], [3], [3], [3],
      [3], [], [], []], (3, 8, 2, 64, 1, 38, 2048)),
])
def test_sglang_cpu_attention_dims_give_the_case(dims, case):
    assert get("paged_attention").shape_from_dims(dims) == case
