"""Issue 27, section 1: the checker judges the domain engines really call with. Each class of a wrong kernel that a
plan cut to the CPU's budget used to pass (a reduction dimension cut, a scalar never varied) is rejected with a
reason that names the value: a GEMM's K runs whole at every served value, and the attention targets' softmax scale
takes the values models pass, off head_dim ** -0.5 too."""

import dataclasses
import math
import re
from pathlib import Path

import pytest
import torch

from autotune import config
from autotune.config import compose
from autotune.targets import get
from autotune.targets.base import ATTENTION_SCALES
from autotune.verify import verify
from autotune.verify.plan.cases import PlanConfig, plan, range_shapes, served_shapes
from autotune.verify.plan.notes import whole_note
from autotune.verify.verdict import Status
from tests.verify.reasons import WRONG_VALUES, says
from tests.verify.variants import example_variant, file_variant

CANDIDATES = Path(__file__).parent / "candidates"
QUICK_FP32 = compose(["verify=quick", "verify.dtypes=[float32]"])
# the paged variants below fail at the target's own default steps and edges: the presets' shapes add only time
TINY_FP32 = ["verify.dtypes=[float32]", "verify.models=[tiny]"]


def test_a_gemm_runs_every_served_k_whole():
    linear = get("linear")
    assert {r[2] for r in linear.range_cuts((512, 896, 4864))} >= {4864}  # a range case holds the served K
    assert linear.cut_shape((43, 896, 4864), 64, 65536)[0] == 43  # M keeps its remainder modulo 64
    # every range shape (the plans keep at most verify.max_range_shapes of each family: 2 quick, 6 default)
    every = compose(["verify=quick", "verify.dtypes=[float32]", "verify.max_range_shapes=0"])
    v = verify("linear", CANDIDATES / "linear_splitk_rounded_down.py", every)
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason
    failing = v.failing_case()
    assert failing is not None and failing.shape[2] % 512, failing.shape  # a K the rounded-down share misses


def test_the_attention_scale_takes_values_off_the_head_dim():
    assert all(abs(s - d ** -0.5) > 1e-6 for s in ATTENTION_SCALES[:1] for d in (32, 64, 128, 256))  # Gemma 2's
    v = verify("paged_attention", CANDIDATES / "paged_attention_ignores_scale.py", QUICK_FP32)
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason
    scale = re.search(r"scale=([0-9.e-]+)", v.reason)
    assert scale and v.failing_case().shape[3] ** -0.5 != float(scale[1]), v.reason  # the case's scale is named


def test_a_sampled_program_cannot_take_its_own_stores_out_of_the_comparison():
    """Issue 27, section 2: reading memory nothing wrote (its own output, before writing it) is a finding, not a
    taint that drops the program's later stores from the comparison."""
    v = verify("rms_norm", CANDIDATES / "rms_norm_self_taint.py", QUICK_FP32)
    assert v.status is Status.INCORRECT, v.reason
    assert "read `y_ptr` where nothing had written" in v.reason, v.reason


def test_a_block_size_that_is_not_a_power_of_two_is_served():
    assert any(shape[4] == 528 for shape in get("paged_attention").edge_shapes)
    v = verify("paged_attention", CANDIDATES / "paged_attention_pow2_blocks.py", QUICK_FP32)
    assert v.status is Status.INCORRECT, v.reason
    assert v.failing_case().shape[4] == 528, v.reason  # the block size names the case


# An attacker who read only autotune/ passed 5 wrong paged-attention kernels at stop 39 (each shown wrong at a served
# shape outside the checker); the domain now has each value, and a variant of the example that fails only there is
# rejected at it: (change, what the failing case must have). The fifth, a block lookup per 16 keys, is right for every
# block size vLLM's Triton backend takes (multiples of 16), and the domain says so (serve.block_size too).
PAGED_DOMAIN = [  # (the changes, each (old, new); the dim of the failing case; its values)
    # head_dim 256 (Gemma 2 2B/9B, vLLM's largest): dims past 128 never written
    ((("BD=triton.next_power_of_2(head_dim)", "BD=min(triton.next_power_of_2(head_dim), 128)"),), 3, (256,)),
    # the sequence search stops after 64 sequences: wrong at a decode step of vLLM's max_num_seqs (1024 on an
    # H100/H200, a range case of the default plan; the quick one keeps 2 of 6), and at a drawn step past 64
    ((("end = seq + num_seqs", "end = seq + tl.minimum(num_seqs, 64)"),), 0, tuple(range(65, 1025))),
    # stop 40's attacker: the window applied to the cached prefix only (a chunk's own keys taken as inside it), wrong
    # once a prefill chunk is longer than its window: the default step's 2048-row chunk under Gemma 3's 1024 keys
    ((("for start in range(lo // TILE * TILE, pos + 1, TILE):",
       "for start in range(tl.minimum(lo, ctx - n) // TILE * TILE, pos + 1, TILE):"),
      ("live = (p >= lo) & (p <= pos)", "live = ((p >= lo) | (p >= ctx - n)) & (p <= pos)")), 5, (2048,)),
]


@pytest.mark.parametrize("changes, dim, values", PAGED_DOMAIN, ids=["head_dim_256", "seqs_1024", "window_chunk"])
def test_paged_attention_is_judged_at_what_engines_serve_beyond_the_presets(tmp_path, changes, dim, values):
    plan_ = compose(["verify=quick", *TINY_FP32] if dim in (3, 5) else TINY_FP32)
    v = verify("paged_attention", example_variant(tmp_path, "paged_attention", *changes[0], *changes[1:]), plan_)
    assert v.status is Status.INCORRECT, v.reason
    assert v.failing_case().shape[dim] in values, v.reason


def test_paged_attention_runs_decode_only_steps_and_served_windows_at_the_longest_context():
    """The attacker's other two: a split-context path taken only when max_query_len is 1 that rounds its share of
    tiles down (the plan's decode-only steps reached 64 keys), and a window forgotten past two key tiles (windows
    were at most 124 keys, under contexts of 512). Each preset's longest context now runs whole in a decode-only
    step with contexts off any round tile count, and in a mixed step windowed at a family's served window; a window
    follows only sizes no cut changes, so a range case or probe makes a served shape's launches."""
    from autotune.targets.paged_attention import SERVED_WINDOWS, _lengths

    cfg = compose([])
    presets = tuple(config.chosen_presets(cfg.verify.models))
    target = get("paged_attention")
    cases = plan(target, None, PlanConfig.from_config(cfg.verify, presets=presets), b"salt")
    def window(case):
        return int(dict(case.scalars).get("window", _lengths(case.shape)[2]))

    longest = [(c.shape, _lengths(c.shape)[1], window(c)) for c in cases if c.shape[6] >= 8190 and not c.sample]
    assert any(shape[5] == 1 and w == 0 and all(n % 16 for n in ctx.tolist()) for shape, ctx, w in longest), longest
    assert any(w in SERVED_WINDOWS and int(ctx.max()) >= 2 * w for _, ctx, w in longest)
    # stop 46 attackers' launchers passed window 0 to every decode-only step, then to every grouped one: each shape
    # had one window, and no grouped decode-only case had one
    assert any(shape[5] == 1 and 0 < w < int(ctx.max()) for shape, ctx, w in longest), longest
    grouped_decodes = [(c.shape, window(c)) for c in cases if c.shape[5] == 1 and c.shape[1] > c.shape[2]]
    assert any(0 < w < shape[6] for shape, w in grouped_decodes) and any(w == 0 for _, w in grouped_decodes)
    for served in served_shapes(target, None, PlanConfig.from_config(cfg.verify, presets=presets)):
        window = _lengths(served)[2]
        for cut in (target.cut_shape(served, 64, 1 << 16), *target.range_cuts(served)):
            assert _lengths(cut)[2] == window, (served, cut)


def test_the_cache_views_the_vllm_export_hands_over_are_checked():
    assert "kv_cache_vllm" in get("paged_attention").layouts
    v = verify("paged_attention", CANDIDATES / "paged_attention_dense_cache.py", QUICK_FP32)
    assert v.status is Status.INCORRECT, v.reason
    assert v.failing_case().layout == "kv_cache_vllm", v.reason


# An attacker who read only autotune/ passed each of these (this stop); each is rejected now:
ATTACKS = [
    # a dead TF32 dot beside the real fp16 one: a dot on half-precision tiles in an fp32 case voids the TF32 excuse
    ("linear_fp16_behind_tf32.py", "held to IEEE"),
    # stream-K: the last tile's second half added with atomics, one K block short; the sample keeps the grid's last
    # index, and atomics into an output make the call run whole
    ("linear_streamk_tail.py", WRONG_VALUES),
    # a grid of M // 64 row blocks: M keeps its remainder modulo 64 in the cut (43 tokens run whole)
    ("linear_row_tail_floor.py", WRONG_VALUES),
]


def test_the_attackers_gemms_are_rejected():
    for name, fragment in ATTACKS:
        v = verify("linear", CANDIDATES / name, QUICK_FP32)
        assert v.status is Status.INCORRECT and says(v.reason, fragment), (name, v.reason)


def test_a_fused_moe_runs_every_served_hidden_size_whole(tmp_path):
    """The gate/up GEMM's reduction dimension is the hidden size: a range case holds each served one whole (the
    experts whole in the other), and a kernel that loops over a fixed 512 channels is wrong there."""
    moe = get("fused_moe")
    assert {r[3] for r in moe.range_cuts((64, 128, 8, 2048, 768))} >= {2048}
    # the example with its gate/up loop over the first 512 channels only: every plan that cut the hidden size to
    # 256 plus its remainder passed it; Qwen3-30B-A3B's hidden size is 2048, Mixtral's 4096
    wrong = example_variant(tmp_path, "fused_moe", "for k0 in range(0, H, BK):",
                            "for k0 in range(0, tl.minimum(H, 512), BK):")
    v = verify("fused_moe", wrong, QUICK_FP32)
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason
    assert v.failing_case().shape[3] > 512, v.reason  # the hidden size names the case


def test_a_fused_moe_wrong_only_for_renormalised_weights_is_incorrect(tmp_path):
    """A round-15 attacker's class: the last top-k slot dropped only where a token's weights sum to 1, as Mixtral's and
    Qwen3-MoE's routers give them; every case had drawn the top-k of a softmax over all experts, never renormalised
    (fused_moe.make_inputs draws both now, and the router's order)."""
    load = "        weight = tl.load(weights_ptr + token * top_k + j)\n"
    wrong = example_variant(tmp_path, "fused_moe", load, load + (
        "        slots = tl.arange(0, 16)\n"
        "        total = tl.sum(tl.load(weights_ptr + token * top_k + slots, mask=slots < top_k, other=0.0), axis=0)\n"
        "        weight = tl.where((tl.abs(total - 1.0) < 1e-3) & (j == top_k - 1) & (E > top_k), 0.0, weight)\n"),
        ("out_ptr, top_k, H, I,", "out_ptr, top_k, H, I, E,"),  # every expert chosen: the weights sum to 1 anyway
        ("out, top_k, hidden, inter,", "out, top_k, hidden, inter, w2.shape[0],"))
    v = verify("fused_moe", wrong, QUICK_FP32)
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason


@pytest.mark.parametrize("old, new, dim, value", [
    ("IS_NEOX=is_neox", "IS_NEOX=True", 5, 0),  # NeoX pairs for every model: wrong for GPT-J style (ChatGLM, GPT-J)
    ("half = cache.shape[1] // 2", "half = head_dim // 2", 4, None),  # the whole head turned: wrong for partial rotary
], ids=["style", "partial"])
def test_rotary_is_judged_in_both_styles_and_at_a_partial_rotary_dim(tmp_path, old, new, dim, value):
    """vLLM's RotaryEmbedding serves GPT-J style and partial rotary dims (Phi-2, GPT-NeoX, ChatGLM): the example with
    either left out passed every case of the old interface (NeoX over the whole head), and fails here."""
    v = verify("rotary_embedding", example_variant(tmp_path, "rotary_embedding", old, new), QUICK_FP32)
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason
    shape = v.failing_case().shape
    assert shape[dim] == value if value is not None else shape[4] < shape[3], v.reason


# An attacker who read autotune/ (stop 41) had these accepted on the first domain of the vLLM-form rotary: each is
# wrong at a call vLLM makes, each now fails
_TURN_ONLY_WHERE = (("(x1 * c - x2 * s)", "tl.where(turn, x1 * c - x2 * s, x1)"),
                    ("(x2 * c + x1 * s)", "tl.where(turn, x2 * c + x1 * s, x2)"))
ROTARY_ATTACKS = {
    # the first token's position taken as the largest (it was always the cache's last row)
    "first_position": (("pos = tl.load(pos_ptr + token)",
                        "pos = tl.minimum(tl.load(pos_ptr + token), tl.load(pos_ptr))"),),
    # a token of a run of positions read from its group of 4's first row, the offset left out: wrong in every prefill
    # chunk (a round-15 attacker's); positions drawn one by one never made a run
    "prefill_runs": (("pos = tl.load(pos_ptr + token)", "pos = tl.load(pos_ptr + token)\n"
                      "    first = tl.load(pos_ptr + token // 4 * 4)\n"
                      "    pos = tl.where(pos == first + token % 4, first, pos)"),),
    # off by one row past position 16384, at rot_dim >= 32: Llama 3.1 and 3.2 serve positions to 131071
    "long_positions": (("pos = tl.load(pos_ptr + token)", "pos = tl.load(pos_ptr + token)\n"
                        "    pos = tl.where((pos >= 16384) & (half >= 16), pos - 1, pos)"),),
    # no rotation from head 48 on: Llama 3 70B has 64 query heads, Llama 3.1 405B 128
    "many_heads": (("mask = (h < heads) & (j < half)", "mask = (h < heads) & (j < half)\n    turn = h < 48"),
                   *_TURN_ONLY_WHERE),
    # no rotation from token 4096 of a step on: vLLM's steps hold up to 8192 tokens (a 4200-token prompt is one)
    "many_tokens": (("mask = (h < heads) & (j < half)", "mask = (h < heads) & (j < half)\n    turn = token < 4096"),
                    *_TURN_ONLY_WHERE),
    # the pass-through columns zeroed past 160 of them: Qwen3-Next passes 192 of its 256 through
    "long_tail": (("tl.store(dst + r, tl.load(src + r, mask=keep), mask=keep)",
                   "tl.store(dst + r, tl.where(r < 2 * half + 160, tl.load(src + r, mask=keep), 0.0), mask=keep)"),),
    # the key paired the other way for multi-head attention of 16 heads or more (Llama 2 7B, Phi-3 mini) ...
    "mha_key": (("_rotate(positions, key, cos_sin_cache, is_neox)",
                 "_rotate(positions, key, cos_sin_cache, is_neox != (key.shape[1] == query.shape[1] >= 16))"),),
    # ... and for a query group of 7 over 4 kv heads or more (Qwen2.5 7B)
    "group7_key": (("_rotate(positions, key, cos_sin_cache, is_neox)",
                    "_rotate(positions, key, cos_sin_cache, is_neox != (query.shape[1] == 7 * key.shape[1] >= 28))"),),
}


@pytest.mark.parametrize("attack", ROTARY_ATTACKS)
def test_rotary_kernels_wrong_only_at_served_sizes_past_the_first_domain_are_incorrect(tmp_path, attack):
    first, *more = ROTARY_ATTACKS[attack]
    v = verify("rotary_embedding", example_variant(tmp_path, "rotary_embedding", *first, *more), QUICK_FP32)
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason


def test_a_served_call_small_enough_runs_as_served_not_cut(tmp_path):
    """A stop 59 attacker's: rotary's five tokens of each served head family (SERVED_HEADS) ran cut to three for the
    interpreter, and no other case had 128 heads past the third token, so a kernel wrong there (Llama 3.1 405B's
    heads) passed the default plan in every draw. In one dtype a call of at most `verify.range_whole_work` runs as
    served (the quick plan's is 0: there with the default plan's bound, fp32 alone)."""
    s = "s = tl.load(cache_ptr + pos * cache_stride + half + j, mask=j < half, other=0.0).to(tl.float32)"
    flip = "\n    s = tl.where((heads >= 128) & (token >= 3), -s, s)"  # the sine mirrored there
    wrong = example_variant(tmp_path, "rotary_embedding", s, s + flip)
    v = verify("rotary_embedding", wrong, compose(["verify=quick", "verify.dtypes=[float32]",
                                                   "verify.range_whole_work=4194304"]))
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason
    assert tuple(v.failing_case().shape[:2]) == (5, 128), v.reason
    cfg = PlanConfig.from_config(compose([]).verify, presets=config.chosen_presets("all"), served_rows=2048)

    def as_served(c: PlanConfig) -> set:
        return {p.shape for p in plan(get("rotary_embedding"), None, c) if p.source == "model"}
    assert (5, 128, 8, 128, 128, 1, 4099) in as_served(cfg)
    assert (5, 128, 8, 128, 128, 1, 4099) not in as_served(dataclasses.replace(cfg, range_whole_work=0))  # the cut's


def test_a_rotary_kernel_in_vllms_own_precision_is_correct(tmp_path):
    """The example computed as vLLM's CUDA kernel computes it (`scalar_t` math in csrc/pos_encoding_kernels.cu): the
    cache row and q/k loaded in their dtype, each product and sum rounded to it. Against an fp32-math reference it was
    3.7x the reference's largest error in fp16 and was rejected; the reference now computes as vLLM does."""
    loads = ("c = tl.load(cache_ptr + pos * cache_stride + j, mask=j < half, other=0.0)",
             "s = tl.load(cache_ptr + pos * cache_stride + half + j, mask=j < half, other=0.0)",
             "x1 = tl.load(src + first, mask=mask, other=0.0)", "x2 = tl.load(src + second, mask=mask, other=0.0)")
    first, *more = ((f"{load}.to(tl.float32)", load) for load in loads)
    v = verify("rotary_embedding", example_variant(tmp_path, "rotary_embedding", *first, *more),
               compose(["verify=quick", "verify.dtypes=[bfloat16,float16]"]))  # in fp32 the variant is the example
    assert v.status is Status.UNMEASURED and all(c.passed for c in v.cases), v.reason
    assert {c.dtype for c in v.cases} == {"bfloat16", "float16"}


def test_rotary_reads_the_cache_it_is_given(tmp_path):
    """A kernel that computes cos and sin from the position with a guessed base (Llama 3's 500000) instead of reading
    the cache is wrong: each case's cache has its own base and scaling."""
    wrong = example_variant(
        tmp_path, "rotary_embedding",
        "c = tl.load(cache_ptr + pos * cache_stride + j, mask=j < half, other=0.0).to(tl.float32)",
        "angle = pos.to(tl.float32) * tl.exp(-(2.0 * j.to(tl.float32) / (2 * half)) * 13.122363377404328)\n"
        "    c = tl.cos(angle)",
        ("s = tl.load(cache_ptr + pos * cache_stride + half + j, mask=j < half, other=0.0).to(tl.float32)",
         "s = tl.sin(angle)"))
    v = verify("rotary_embedding", wrong, QUICK_FP32)
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason


def test_a_fused_moe_serves_tokens_past_the_first_64_whole(tmp_path):
    """A served step of more than 64 tokens runs at 65 with every program: the example with a grid of whole 64-token
    blocks past the first 64 (a persistent kernel's rounded-down share) drops the 65th token there. The quick plan
    samples every range case; with the default plan's range_whole_work the case runs whole."""
    moe = get("fused_moe")
    assert any(r[0] == 65 for r in moe.range_cuts((512, 128, 8, 2048, 768)))
    assert all(r[0] <= 64 for r in moe.range_cuts((64, 8, 2, 4096, 14336)))  # 64 tokens are the ordinary cases'
    wrong = example_variant(tmp_path, "fused_moe", "_down[(tokens, triton.cdiv(hidden, BK))]",
                            "_down[(tokens if tokens <= 64 else tokens - tokens % 64, triton.cdiv(hidden, BK))]")
    v = verify("fused_moe", wrong, compose(["verify=quick", "verify.dtypes=[float32]",
                                            f"verify.range_whole_work={4 * 1024 * 1024}"]))
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason
    assert v.failing_case().shape[0] == 65, v.reason


def test_the_verdict_names_the_served_values_no_case_ran_whole():
    moe = get("fused_moe")
    quick = PlanConfig.from_config(compose(["verify=quick"]).verify, presets=config.model_presets(),
                                   served_rows=config.served_rows())
    default = dataclasses.replace(quick, range_whole_work=4 * 1024 * 1024)
    for plan_config, tokens in ((quick, "every program up to 8, a sample of programs at 512"),
                                (default, "every program up to 65, a sample of programs at 512")):
        served = served_shapes(moe, None, plan_config)
        note = whole_note(moe, plan(moe, None, plan_config), served)
        top = max(s[0] for s in served)  # every served token count no case ran whole is named, the largest last
        assert re.search(rf"tokens (\d+, )*{top} \({re.escape(tokens)}", note), note
    rms = get("rms_norm")  # every served width runs whole; rows are the only gap, and a row op's leading dims
    note = whole_note(rms, plan(rms, None, quick), served_shapes(rms, None, quick))
    assert note.startswith("served values the CPU plan never ran with every program: rows ") and "hidden" not in note
    # and each served call no case ran whole at its sizes (a kernel wrong in 2 rows of 2048 is checked there as far
    # as a sample of its programs reaches, or not at all)
    cases = plan(rms, None, quick)
    whole = {c.shape for c in cases if not c.sample}
    sampled = {c.shape for c in cases if c.sample}
    rest = [s for s in served_shapes(rms, None, quick) if s not in whole and s != (2048, 4096)]
    assert rest and all(f"{list(s)}" in note.split("the served calls ")[1] for s in rest), note
    assert all(f"{list(s)} (a sample of its programs)" in note for s in rest if s in sampled), note
    # sizes together: a kernel may switch at rows x width, which no case runs whole at the served 2048 x 4096
    whole_default = whole_note(rms, plan(rms, None, default), served_shapes(rms, None, default))
    assert "the largest call [2048, 4096] (a product of sizes of 8388608; every program up to " in whole_default


def test_a_specialisation_only_served_sizes_compile_gets_a_case_that_runs_it(tmp_path):
    """Issue 27, section 4: a constexpr that follows the served token count (next_power_of_2(tokens), as SGLang's
    token sort has) compiles at 512 and 2048 tokens, which no case cut for the CPU reaches but the 512-token range
    case (an expert's served load); dry calls at smaller probes find the cheapest shape that compiles 2048's too
    (1025 tokens), and a sampled case there runs it, instead of a false "not proven"."""
    path = example_variant(tmp_path, "fused_moe", "BK: tl.constexpr):", "BK: tl.constexpr, TOKENS_P2: tl.constexpr):",
                           ("BI=BI, BK=BK)", "BI=BI, BK=BK, TOKENS_P2=triton.next_power_of_2(tokens))"))
    v = verify("fused_moe", path, QUICK_FP32)
    assert v.status is Status.UNMEASURED, v.reason
    probes = [c for c in v.cases if c.source == "probe"]
    ran = {triton_p2(c.shape[0]) for c in v.cases if c.source in ("probe", "range")}
    assert probes and ran >= {512, 2048}, [c.shape for c in v.cases if c.source in ("probe", "range")]
    # too dear to run whole: a sample of their programs, and the verdict says what that leaves out
    assert any(n.startswith("launches only served sizes make ran as a sample of their programs at ") and "[1025, " in n
               and "outputs the grid leaves unwritten at served sizes would not show" in n for n in v.notes), v.notes


def triton_p2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def test_a_launch_only_a_served_combination_of_sizes_makes_stays_unproven(tmp_path):
    """Raised one at a time, neither the tokens nor the hidden size makes this launch; only both served together do
    (too large for the CPU): "not proven", naming the launch, rather than a guess."""
    path = example_variant(tmp_path, "fused_moe", "BK: tl.constexpr):", "BK: tl.constexpr, BIG: tl.constexpr):",
                           ("BI=BI, BK=BK)", "BI=BI, BK=BK, BIG=tokens >= 512 and hidden >= 2048)"))
    v = verify("fused_moe", path, QUICK_FP32)
    assert v.status is Status.INCORRECT and v.reason.startswith("not proven: the launch "), v.reason
    assert "BIG=True" in v.reason and "never ran in a compared case" in v.reason, v.reason


# A served step's sizes that go wrong only together, each a variant of the example with its scale off by 0.1% there
# (right on every case that keeps one of them small): a range case runs the step whole on one kv head, sampled
STEP_SIZES = [
    # 1024 decodes over contexts up to 512: a scratch or split count sized by sequences x context
    ("max_seq_len):\n", "max_seq_len):\n    scale = scale * (1.0 if seq_lens.shape[0] * max_seq_len <= 65536 else 1.001)\n",
     lambda shape: shape[0] * shape[6] > 65536),
    # a 2048-row prefill chunk (vLLM's default max_num_batched_tokens): a path taken past 512 query rows
    ("max_seq_len):\n", "max_seq_len):\n    scale = scale * (1.0 if max_query_len <= 512 else 1.001)\n",
     lambda shape: shape[5] > 512),
]


@pytest.mark.parametrize("old, new, failing", STEP_SIZES, ids=["seqs_x_context", "chunk_2048"])
def test_a_served_steps_sizes_run_large_together(tmp_path, old, new, failing):
    target = get("paged_attention")
    assert (17, 4, 1, 128, 16, 2048, 4096) in target.range_cuts((17, 32, 8, 128, 16, 2048, 4096))
    assert (1024, 4, 1, 128, 16, 1, 512) in target.range_cuts((1024, 32, 8, 128, 16, 1, 512))
    v = verify("paged_attention", example_variant(tmp_path, "paged_attention", old, new),
               compose(["verify=quick", *TINY_FP32]))
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason
    assert failing(v.failing_case().shape), v.reason


def test_two_sizes_the_cut_shrinks_run_large_together(tmp_path):
    """A GEMM right wherever N or K is below 1024 and off by 0.1% where both reach it (a stop 48 attacker's int8
    weight path): every case keeps one of them at a tile but the one that sets both at served sizes together."""
    path = example_variant(tmp_path, "linear", "acc.to(y_ptr.dtype.element_ty)",
                           "(acc * tl.where((N >= 1024) & (K >= 1024), 1.001, 1.0)).to(y_ptr.dtype.element_ty)")
    v = verify("linear", path, compose(["verify=quick", *TINY_FP32, "verify.together_values=33554432",
                                        "verify.together_flops=2147483648"]))
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason
    shape = v.failing_case().shape
    assert shape[1] >= 1024 and shape[2] >= 1024, v.reason


def test_a_grid_past_cudas_limit_on_axis_one_fails_as_on_a_gpu():
    """The dry call at the served shape carries the served grid: 114,688 programs on axis 1 is a launch a GPU
    refuses, named, though every value the kernel computes is right."""
    v = verify("silu_and_mul", CANDIDATES / "silu_grid_y_over_cuda_limit.py", QUICK_FP32)
    assert v.status is Status.RUNTIME_ERROR, v.reason
    assert "CUDA runs at most 65535 programs along grid axes 1 and 2" in v.reason, v.reason


def test_a_drawn_program_cannot_take_its_stores_out_of_the_sample_by_reading_partial_results():
    v = verify("rms_norm", CANDIDATES / "rms_norm_taints_its_sample.py", QUICK_FP32)
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason
    assert "a drawn program read what only skipped programs would have written: run whole" in v.reason, v.reason


DRAWN_STEPS = ("verify=quick", "verify.together_values=33554432", "verify.together_flops=2147483648")  # the default
# plan's drawn steps (its together budget), the quick plan otherwise


def _weight_dropped_where(tmp_path, condition: str, plan: tuple[str, ...] = DRAWN_STEPS):
    """The verdict on `plan` (by default the default plan's drawn steps: the together budget, the quick plan otherwise),
    in fp32, of the example RMSNorm with its weight left out of the rows where `condition` holds (of `row` and the
    runtime `n_rows`)."""
    wrong = example_variant(
        tmp_path, "rms_norm", "    n_cols,\n    x_row_stride", "    n_cols, n_rows,\n    x_row_stride",
        ("        n_cols,\n        x2d.stride(0)", "        n_cols, n_rows,\n        x2d.stride(0)"),
        ("tl.store(y_row + cols, (x * rstd * w)", f"tl.store(y_row + cols, (x * rstd * tl.where({condition}, 1.0, w))"))
    return verify("rms_norm", wrong, compose([*plan, *TINY_FP32[:1]]))


def test_a_kernel_wrong_only_at_runtime_row_counts_between_the_plans_is_caught_at_a_drawn_step(tmp_path):
    """A round-14 attacker's rms_norm: one program per row, and the rows of a ragged last group of 256 past the
    first skip the weight, on a runtime count (no launch signature of its own): wrong at a 300-token step, right
    at every count the plan ran (up to 256, 1024, 2048). Each octave of counts up to a step's runs at an odd count
    and a padded one drawn per run (plan.cases.drawn_steps), on the default plan's together budget."""
    v = _weight_dropped_where(tmp_path, "(n_rows > 256) & (row >= n_rows // 256 * 256)")
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason
    rows = v.failing_case().shape[0]
    assert rows > 256 and rows % 256, v.reason  # an odd count or a padded one (plan.steps.step_counts)


@pytest.mark.parametrize("condition, failing, plan", [
    # the batch sizes vLLM pads a step to for its CUDA graphs past 64, and an eager step's even counts (round 15)
    ("(n_rows > 64) & (n_rows % 8 == 0) & ((n_rows & (n_rows - 1)) != 0)", lambda rows: rows > 64 and rows % 8 == 0,
     DRAWN_STEPS),
    ("(n_rows > 64) & (n_rows % 2 == 0) & (n_rows % 8 != 0)", lambda rows: rows > 64 and rows % 2 == 0 and rows % 8,
     DRAWN_STEPS),
    # a multiple of 8 from 256 to 512 between vLLM's graphs of 16, and a decode batch of 4 to 6 sequences, which the
    # quick plan's default shapes run and the default plan's profile shapes did not (round 16)
    ("(n_rows > 256) & (n_rows < 512) & (n_rows % 16 == 8)", lambda rows: 256 < rows < 512 and rows % 16 == 8,
     DRAWN_STEPS),
    ("(n_rows >= 4) & (n_rows <= 6)", lambda rows: 4 <= rows <= 6, ()),
], ids=["padded", "even", "eights_256_512", "decode_4_to_6"])
def test_a_kernel_wrong_only_at_a_class_of_step_counts_is_caught_at_a_drawn_step(tmp_path, condition, failing, plan):
    """Attackers' rms_norm, right at every count but one class of them that no launch signature shows: round 15's
    wrong past 64 at the batch sizes vLLM pads a step to for its CUDA graphs (multiples of 8 that are not powers of
    two: most of a decode-heavy server's steps), or at every even count; round 16's at decode batches of 4 to 6 rows
    (no case ran them) and at multiples of 8 but not 16 from 256 to 512 (the padded draw there steps by 16). Every
    count up to 8 runs, and each octave a count of each class, drawn per run (plan.steps.step_counts)."""
    v = _weight_dropped_where(tmp_path, condition, plan)
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason
    rows = v.failing_case().shape[0]
    assert failing(rows), v.reason


def test_a_sample_that_compares_nothing_alone_and_is_too_slow_whole_runs_whole_at_a_smaller_size(tmp_path):
    """The same two passes, right: every drawn program still reads the later rows' sums, so a sample compares only
    the grid's last row. Where running the call again whole would take the interpreter more than
    `verify.rerun_within_s` (here a millisecond: a fused MoE's [682, 8, 2, 4096, 64] took minutes), it runs whole
    at a smaller size instead, and the verdict says which."""
    right = file_variant(tmp_path, CANDIDATES / "rms_norm_taints_its_sample.py",
                         ("    rstd = tl.where(row < n_rows - 2, rstd * (1.0 + 1e-3 * (ahead > 0).to(tl.float32)), "
                          "rstd)\n", "    rstd = tl.where(ahead >= 0, rstd, rstd)\n"))
    v = verify("rms_norm", right, compose(["verify=quick", "verify.dtypes=[float32]", "verify.rerun_within_s=0.001"]))
    assert v.status is Status.UNMEASURED, v.reason
    note = next(n for n in v.notes if n.startswith("samples that compared nothing alone"))
    said = re.findall(r"\[([^\]]+)\] float32 \(about \d+ s whole\) ran whole as \[([^\]]+)\]", note)
    assert said, note
    ran = {tuple(c.shape) for c in v.cases if c.source == "range"}
    for big, small in said:
        big, small = (tuple(int(x) for x in re.findall(r"=(\d+)", s)) for s in (big, small))
        assert small in ran and math.prod(small) < math.prod(big), note


@pytest.mark.parametrize("setting, said", [("verify.whole_within_s=30", "or the rest of it took at most verify.whole"),
                                           ("verify.concurrency_whole=true", "")])
def test_a_persistent_gemms_rounded_down_share_is_caught_where_the_output_has_more_tiles_than_sms(setting, said):
    """A persistent grid of one program per SM whose share of the tiles is rounded down leaves tiles unwritten only
    past 132 of them. A range case (in one dtype) runs M whole with N as far as that takes for 128 x 128 tiles, and
    the span cuts each served N whole at a decode step's 8 rows (152 tiles at Qwen2.5-0.5B's 9728): with
    every program on the default plan (`verify.concurrency_whole`: a kernel whose programs are slow enough to keep
    the next rule from running it whole passed), and a sampled case whose skipped programs are cheap runs again whole
    (`verify.whole_within_s`); both are off on the quick plan and set here. Every output is compared then."""
    (m, n, _), = get("linear").concurrency_cuts((2048, 28672, 4096))
    assert m * n > 132 * 128 * 128, (m, n)
    v = verify("linear", CANDIDATES / "linear_persistent_share_rounded_down.py",
               compose(["verify=quick", "verify.dtypes=[float32]", setting]))
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason
    assert said in v.reason, v.reason
    m, n, _ = v.failing_case().shape
    assert -(-m // 64) * -(-n // 64) > 132, v.reason  # more 64 x 64 tiles than SMs: the share rounds down (at a
    # concurrency cut, or at a span cut's served N)


def test_a_grid_capped_along_n_is_caught_at_the_served_n_past_the_cap():
    """A stop 45 attacker's class: column programs capped (here at 96) with a share of the tiles rounded down is
    exact at every N up to 6144 and leaves tiles of N = 9728, 16384 and 28672 unwritten. The GEMMs' span cuts run
    every served N whole at a decode step's rows (in one dtype, every program with `verify.concurrency_whole`, which
    the quick plan leaves off and this sets)."""
    spans = [run for _, run in range_shapes(get("linear"), None, PlanConfig.from_config(
        compose([]).verify, presets=config.model_presets(), served_rows=config.served_rows()), "span")]
    assert {n for _, n, _ in spans} >= {4096, 6144, 9728, 28672} and all(m <= 8 and k <= 127 for m, _, k in spans)
    v = verify("linear", CANDIDATES / "linear_column_programs_capped.py",
               compose(["verify=quick", "verify.dtypes=[bfloat16]", "verify.concurrency_whole=true"]))
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason
    _, n, _ = v.failing_case().shape
    assert -(-n // 64) > 96 and -(-n // 64) % 96, v.reason  # a served N whose tiles the capped share leaves out


def test_a_fused_moe_that_caps_the_intermediate_at_run_time_is_caught_at_the_served_sizes(tmp_path):
    """A stop 45 attacker's class: the intermediate loop cut to a chunk count passed at run time (no new launch
    signature; here at most 6 chunks of 64, exact up to 384) was exact at every size the plan ran (256 at most) and
    wrong at Qwen3-30B-A3B's 768. Fused MoE's span cuts run each served intermediate and hidden size whole at one
    token (the example's down projection, one program per token and 128 output columns: every program, on the quick
    plan too)."""
    capped = example_variant(
        tmp_path, "fused_moe", "out_ptr, top_k, H, I,", "out_ptr, top_k, H, I, chunks,",
        ("for i0 in range(0, I, BI):\n            inside = ii < I - i0\n            act = tl.load",
         "for i0 in range(0, chunks * BI, BI):\n            inside = ii < I - i0\n            act = tl.load"),
        ("out, top_k, hidden, inter,", "out, top_k, hidden, inter, min(triton.cdiv(inter, 64), 6),"))
    v = verify("fused_moe", capped, compose(["verify=quick", "verify.dtypes=[bfloat16]"]))
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason
    assert v.failing_case().shape[4] > 6 * 64, v.reason


def test_a_gemm_that_skips_quiet_activation_tiles_is_caught(tmp_path):
    """A stop 45 attacker's class: int8_linear drew its activations from N(0, 1) alone, where no 16 x 64 tile is all
    below 0.03; a kernel leaving such tiles out passed, and drops nearly every tile at a layer's scale of 2^-6. Its
    activations are layer-scaled now, as linear's and fused MoE's are."""
    dot = 'acc = tl.dot(a, b.to(a.dtype), acc, input_precision="ieee")'
    skips = example_variant(tmp_path, "int8_linear", dot, "loud = tl.max(tl.max(tl.abs(a.to(tl.float32)), axis=1), "
                            f"axis=0) >= 0.03\n        acc = tl.where(loud, {dot[6:]}, acc)")
    v = verify("int8_linear", skips, compose(["verify=quick", "verify.dtypes=[bfloat16]"]))
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason


def test_a_path_past_2_24_values_is_run_at_the_largest_served_call_that_fits(tmp_path):
    """A round-9 attacker's SiLU-and-mul took another path past 2^24 input values, reading the output's row stride
    there: of the served calls only Llama 3's [2048, 28672] and Qwen2.5-0.5B's [2048, 9728] pass 2^24, and only the
    largest served call ran whole, Llama's, which is past verify.served_whole_work. The largest that fits runs."""
    path = example_variant(tmp_path, "silu_and_mul", "](x2, y, x2.stride(0), y.stride(0), d",
                           "](x2, y, y.stride(0) if x2.numel() > 2 ** 24 else x2.stride(0), y.stride(0), d")
    v = verify("silu_and_mul", path, compose(["verify=quick", "verify.dtypes=[bfloat16]",
                                              "verify.models=[qwen2_5_0_5b,llama3_8b]",
                                              "verify.served_whole_work=67108864"]))
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason
    assert v.failing_case().shape == [2048, 9728], v.reason


def test_a_launch_one_program_short_only_at_the_largest_steps_is_caught_on_the_default_plan():
    """The attacker's a1: rows - 1 programs past 4M values. The default plan runs the largest served call ([2048, 4096],
    within `verify.served_whole_work`) uncut with every program; the step's last row is unwritten there."""
    v = verify("rms_norm", CANDIDATES / "rms_norm_one_program_short_past_4m.py",
               compose(["verify.dtypes=[float32]", "verify.shapes=default"]))
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason
    assert "[2048, 4096]" in v.reason, v.reason



def test_paged_attention_steps_come_with_their_decodes_first_and_in_any_order_with_fresh_prompts():
    """A stop 46 attacker's kernel took every row for a decode when sequence 0 had one row; sequence 0 was always the
    longest prefill chunk, and vLLM's scheduler (as autotune's own, serve/engine.py) puts the decodes first."""
    from autotune.targets.paged_attention import _lengths

    cfg = compose([])
    cases = plan(get("paged_attention"), None, PlanConfig.from_config(
        cfg.verify, presets=tuple(config.chosen_presets(cfg.verify.models))), b"salt")
    orders = {c.shape: _lengths(c.shape)[0].tolist() for c in cases if c.shape[0] > 1 and c.shape[5] > 1}
    decodes_first = [rows for rows in orders.values() if rows[0] == 1 and max(rows) > 1]
    decode_after_a_prefill = [rows for rows in orders.values() if any(
        a > 1 and b == 1 for i, a in enumerate(rows) for b in rows[i + 1:])]
    assert decodes_first and decode_after_a_prefill, orders
    # a stop 46 attacker's kernel took a fresh prompt's causal limit at its end: a context was almost never its chunk
    fresh = [(n, c) for shape in orders for n, c in zip(*map(torch.Tensor.tolist, _lengths(shape)[:2])) if n == c > 1]
    assert any(n % 64 for n, _ in fresh), fresh


@pytest.mark.parametrize("cheat", [
    pytest.param(("pos = ctx - n + (row - first)  # this query's position in its sequence",
                  "n0 = tl.load(cu_ptr + 1) - tl.load(cu_ptr)\n"
                  "    pos = tl.where(n0 == 1, ctx - 1, ctx - n + (row - first))"),
                 id="rows_taken_for_decodes_when_a_decode_comes_first"),
    pytest.param(("out, scale, window, seq_lens", "out, scale, window if max_query_len > 1 else 0, seq_lens"),
                 id="no_window_in_decode_only_steps"),
    pytest.param(("out, scale, window, seq_lens", "out, scale, window if max_query_len > 1 or group == 1 else 0, "
                  "seq_lens"), id="no_window_in_grouped_decode_only_steps"),
    pytest.param(("pos = ctx - n + (row - first)  # this query's position in its sequence",
                  "pos = tl.where((ctx == n) & (n > 1), ctx - 1, ctx - n + (row - first))"),
                 id="a_fresh_prompts_rows_see_its_whole_chunk"),
    # a shortcut where a sequence's first blocks are consecutive ids (a fresh allocator's), off by one block at odd ones
    # (never below block 0: read out of bounds there it was refused as such, not for its values, in some draws)
    pytest.param(("        at = block * skb", "        row0 = table_ptr + seq.to(tl.int64) * stb\n"
                  "        head = tl.load(row0).to(tl.int64)\n        run = head >= 0\n"
                  "        for i in tl.static_range(1, 4):\n"
                  "            run = run & (tl.load(row0 + i, mask=table_width > 3, other=-1) == head + i)\n"
                  "        block = tl.where(run, tl.maximum(block - (p // BS) % 2, 0), block)\n        at = block * skb"),
                 id="consecutive_blocks_read_off_by_one"),
    # a round-16 attacker's class: keys in a block the previous sequence's table holds at the same place (a prefix
    # cache hit) taken as attended already and left out (the attacker's own form, only where the first two blocks
    # are shared, met a hit in some quick plans' draws and not in others)
    pytest.param(("        at = block * skb", "        ahead = table_ptr + tl.maximum(seq - 1, 0).to(tl.int64) * stb + p // BS\n"
                  "        met = tl.where(seq > 0, tl.load(ahead, mask=live, other=-1).to(tl.int64), -1)\n"
                  "        live = live & (met != block)\n"
                  "        at = block * skb"),
                 id="prefix_hit_skipped"),
    # round 16's attacker: vLLM pads a block table's unused entries with 0 (its null block); every table had held
    # other sequences' blocks there, so a kernel wrong only where a row ends in zeros met none
    pytest.param(("    out = acc / denom[:, None]\n",
                  "    out = acc / denom[:, None]\n"
                  "    tail = table_ptr + seq.to(tl.int64) * stb + table_width - 2\n"
                  "    wide = table_width > 2\n"
                  "    padded = wide & (tl.load(tail, mask=wide, other=1) == 0)\n"
                  "    padded = padded & (tl.load(tail + 1, mask=wide, other=1) == 0)\n"
                  "    out = tl.where(padded, out * 0.5, out)\n"),
                 id="zero_padded_table_halved"),
])
def test_paged_attention_kernels_wrong_only_in_orders_and_windows_engines_serve_are_incorrect(tmp_path, cheat):
    v = verify("paged_attention", example_variant(tmp_path, "paged_attention", *cheat),
               compose(["verify=quick", "verify.dtypes=[bfloat16]"]))
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason


def test_a_paged_attention_wrong_only_at_decode_batches_between_the_plans_is_caught_at_a_drawn_step(tmp_path):
    """The plan's paged attention cases ran 1 to 4, 17, 31 and 1024 sequences: a kernel wrong only for decode
    batches of 5 to 16 sequences (a runtime count: no launch signature shows it) met none. A step of each drawn
    count runs as that many decodes (paged_attention.step_shapes, plan.steps.step_counts), on the together budget."""
    out = "    out = acc / denom[:, None]\n"
    wrong = example_variant(tmp_path, "paged_attention", out,
                            out + "    out = tl.where((num_seqs >= 5) & (num_seqs <= 16), out * 0.5, out)\n")
    v = verify("paged_attention", wrong, compose([*DRAWN_STEPS, "verify.dtypes=[bfloat16]"]))
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason
    assert 5 <= v.failing_case().shape[0] <= 16, v.reason


def test_a_kernel_wrong_only_at_magnitudes_n01_never_reaches_is_incorrect(tmp_path):
    """A stop 46 attacker's class: inputs came as N(0, 1) (a row's largest value 2 to 5) or N(0, 1) x 300, and
    kernels that went wrong only where a row's largest value lay between 8 and 100 passed silu_and_mul, softmax,
    rotary_embedding and fused_add_rms_norm. Rows now come at drawn scales from 1/64 to 256 (base.row_scales)."""
    y = "y = gate / (1.0 + tl.exp(-gate)) * up"
    clamps = example_variant(tmp_path, "silu_and_mul", y, "loud = tl.max(tl.abs(gate), axis=0)\n    gate = tl.where("
                             "(loud > 8.0) & (loud < 100.0), tl.minimum(tl.maximum(gate, -6.0), 6.0), gate)\n    " + y)
    v = verify("silu_and_mul", clamps, compose(["verify=quick", "verify.dtypes=[bfloat16]"]))
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason


def test_an_rmsnorm_that_leans_one_percent_within_rtol_is_incorrect(tmp_path):
    """A stop 46 attacker's class: bfloat16 output scaled by 1.01, within rtol at every value (accuracy.bias)."""
    store = "tl.store(y_row + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)"
    leans = example_variant(tmp_path, "rms_norm", store, store.replace("(x * rstd * w)", "(x * rstd * w * 1.01)"))
    v = verify("rms_norm", leans, compose(["verify=quick", "verify.dtypes=[bfloat16]"]))
    assert v.status is Status.INCORRECT and says(v.reason, ("less accurate than the reference", "systematic bias")), \
        v.reason


def test_an_rmsnorm_whose_error_sits_in_one_token_in_32_is_incorrect(tmp_path):
    """A third stop 46 attacker's class: one bfloat16 token in 32 made 0.8% large, within rtol at every value, its
    RMSE and lean diluted by the other 31 (compare._less_accurate, row by row)."""
    store = "tl.store(y_row + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)"
    heavy = example_variant(tmp_path, "rms_norm", store, store.replace(
        "(x * rstd * w)", "(x * rstd * w * tl.where(row % 32 == 13, 1.008, 1.0))"))
    v = verify("rms_norm", heavy, compose(["verify=quick", "verify.dtypes=[bfloat16]"]))
    assert v.status is Status.INCORRECT and says(v.reason, ("less accurate than the reference",)), v.reason


def test_an_rmsnorm_that_leaves_a_massive_activation_out_of_its_mean_square_is_incorrect(tmp_path):
    """A stop 46 attacker's class: row scales move whole rows, and an RMSNorm that leaves out of the mean square any
    value whose square passes half its row's sum passed; served models carry massive activations (base.massive_values)."""
    rstd = "rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)"
    robust = example_variant(tmp_path, "rms_norm", rstd, "sq = x * x\n        rstd = tl.rsqrt(tl.sum(tl.where(sq > "
                             "0.5 * tl.sum(sq, axis=0), 0.0, sq), axis=0) / n_cols + eps)")
    v = verify("rms_norm", robust, compose(["verify=quick", "verify.dtypes=[bfloat16]"]))
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason
