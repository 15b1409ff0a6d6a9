"""The case plan: shapes from the profile or the defaults plus edges, the model presets' and the run's random
sizes, every dtype, the target's layouts and scalar values, inputs keyed by a secret salt, cuts on CPU only."""

import dataclasses
import itertools
import random
import re

import pytest
import torch
from omegaconf import OmegaConf

from autotune import config
from autotune.config import compose, conf_dir
from autotune.targets import all_targets, get
from autotune.targets.base import DENSE_LAYOUTS, OpClass
from autotune.verify.plan import cases as case_plan
from autotune.verify.plan import dry, followup, steps
from autotune.verify.plan import notes
from autotune.verify.plan.cases import CONTRACT_SOURCES, PlanConfig, contract_shapes, cut_rows, numel, plan
from autotune.verify.plan.notes import cut_note
from autotune.verify.plan.data import answers, make_data

CFG = compose([]).verify


def plan_config(cfg=CFG, whole: bool = False) -> PlanConfig:
    return PlanConfig.from_config(cfg, presets=config.model_presets(), served_rows=config.served_rows(), whole=whole)


PLAN, GPU_PLAN = plan_config(), plan_config(whole=True)
RMS = get("rms_norm")
SALT = b"0123456789abcdef"
PRESETS = [OmegaConf.load(p) for p in sorted((conf_dir() / "model").glob("*.yaml"))]


def test_cut_rows_shrinks_leading_dims_only():
    assert cut_rows((1024, 64), 256) == (256, 64)
    assert cut_rows((256, 32, 128), 256) == (8, 32, 128)
    assert cut_rows((3, 5120), 256) == (3, 5120)
    assert cut_rows((256, 28672), 256, 262144) == (9, 28672)
    assert cut_rows((1, 100000), 256, 10) == (1, 100000)
    assert cut_rows((4096, 4096), None) == (4096, 4096)


def test_cpu_plan_covers_every_shape_dtype_and_kind():
    every = plan(RMS, None, PLAN, salt=SALT)
    assert [c.index for c in every] == list(range(len(every)))
    ranged = [c for c in every if c.source in ("range", "together")]
    cases = [c for c in every if c not in ranged]
    # the range cases: a served step's 2048 rows (a persistent grid loops over them) with every program run (cheap
    # enough: every output compared), and the served widths whole at up to 4M values (sampled), in every dtype, and
    # the largest served call uncut and whole; the quick plan samples them all
    assert {c.shape for c in ranged if c.sample == 0 and c.shape[0] == 2048} == {(2048, 256), (2048, 128),
                                                                                  (2048, 4096)}
    assert {(1024, 4096), (2048, 2048)} <= {c.shape for c in ranged if c.sample}
    quick = plan(RMS, None, plan_config(compose(["verify=quick"]).verify), salt=SALT)
    assert all(c.sample == 1 for c in quick if c.source == "range") and any(c.source == "range" for c in quick)
    assert {c.dtype for c in ranged} == {torch.float32, torch.bfloat16, torch.float16}
    assert all(c.kind == "normal" for c in ranged)
    served = {s for s, _ in contract_shapes(RMS, PLAN, SALT) if case_plan.work(RMS, s) <= PLAN.range_whole_work}
    wanted = {cut_rows(s, 256, 262144) for s in RMS.default_shapes + RMS.edge_shapes}
    wanted |= {cut_rows(s, 64, 262144 // 4) for s, _ in contract_shapes(RMS, PLAN, SALT)}
    assert {c.shape for c in cases if c.kind == "normal" and c.seed == 0} == wanted | served  # [256, 4096] -> [64, ..]
    assert any(cut_rows(s, 64, 262144 // 4) != s for s in served)  # a preset's or drawn call the cut shrank, whole
    for shape in served - wanted:  # in one dtype, the shape's turn
        assert len({c.dtype for c in cases if c.shape == shape and c.kind == "normal"}) == 1
    for shape in {c.requested_shape for c in cases if c.source not in CONTRACT_SOURCES}:
        mine = [c for c in cases if c.requested_shape == shape]
        assert {c.dtype for c in mine if c.kind == "normal"} == {torch.float32, torch.bfloat16, torch.float16}
        assert {c.dtype for c in mine if c.kind == "large"} == {torch.bfloat16, torch.float16}
        assert len({c.kind for c in mine}) == 3 and {c.seed for c in mine} == {0, 1}
        assert sum(c.refill and c.repeat for c in mine) == 1  # rotating over the dtypes
    for shape in {c.requested_shape for c in cases if c.source in CONTRACT_SOURCES}:  # normal in every dtype
        mine = [c for c in cases if c.requested_shape == shape]
        assert {c.dtype for c in mine if c.kind == "normal"} == {torch.float32, torch.bfloat16, torch.float16}
        same = [c for c in cases if c.shape in {m.shape for m in mine}]  # (a cut another shape also gave runs once)
        assert any(c.kind == "special" for c in same) and any(c.refill and c.repeat for c in same)
    assert all(c.shape_numel // c.shape[-1] <= 256 for c in cases if c.shape not in served)
    sizes = [c.shape_numel for c in cases[:-1]]
    assert sizes == sorted(sizes)  # cheapest first, then the long run (test_the_long_run_of_calls_ends_the_plan...)


@pytest.mark.parametrize("name", ["rms_norm", "paged_attention"])
def test_the_quick_plan_runs_each_extra_shape_in_one_dtype_taking_turns(name):
    """verify.every_dtype=false (the quick plan): the default shapes in every dtype, each edge, preset's and drawn
    shape in one, the dtypes taking turns so that every dtype meets extra shapes, and a repeat, a refill and NaN/Inf
    inputs on one round of the turns in every len(dtypes); the default plan, every shape in every dtype."""
    target, dtypes = get(name), {torch.float32, torch.bfloat16, torch.float16}
    quick = [c for c in plan(target, None, plan_config(compose(["verify=quick"]).verify), salt=SALT)
             if c.source not in ("range", "together")]
    extra = [c for c in quick if c.source != "default"]
    by_shape = {c.requested_shape: set() for c in extra}
    for c in extra:
        by_shape[c.requested_shape].add(c.dtype)
    assert all(len(d) == 1 for d in by_shape.values()), by_shape
    assert {c.dtype for c in extra} == dtypes and {c.dtype for c in extra if c.repeat and c.refill} == dtypes
    assert 0 < sum(c.kind == "special" for c in extra) < len(by_shape)
    for shape in {c.requested_shape for c in quick if c.source == "default"}:
        assert {c.dtype for c in quick if c.requested_shape == shape and c.kind == "normal"} == dtypes
    every = [c for c in plan(target, None, PLAN, salt=SALT) if c.source in ("edge", *CONTRACT_SOURCES)]
    assert all({c.dtype for c in every if c.requested_shape == s and c.kind == "normal"} == dtypes
               for s in {c.requested_shape for c in every})


def test_gpu_plan_cuts_nothing_and_checks_everything():
    cases = plan(RMS, None, GPU_PLAN, salt=SALT)
    contract = {s for s, _ in contract_shapes(RMS, PLAN, SALT)}
    assert {c.shape for c in cases} == set(RMS.default_shapes) | set(RMS.edge_shapes) | contract
    assert all(c.repeat and c.refill for c in cases if c.kind == "normal" and c.seed == 0)
    assert cut_note(RMS, None, GPU_PLAN, salt=SALT) == ""


def test_every_preset_width_is_checked():
    """Read from autotune/conf/model/, not a hand list: Llama 3.2 1B's hidden 2048 was never a case before."""
    hidden = {int(p.hidden_size) for p in PRESETS}
    gate_up = {2 * int(p.intermediate_size) for p in PRESETS}
    assert {2048, 4096} <= hidden and 28672 in gate_up
    for target, widths in ((RMS, hidden), (get("fused_add_rms_norm"), hidden), (get("silu_and_mul"), gate_up)):
        assert widths <= {c.shape[-1] for c in plan(target, None, PLAN, salt=SALT)}, target.name
    rope = {(int(p.num_heads), int(p.num_kv_heads), int(p.head_dim), int(p.max_seq_len)) for p in PRESETS}
    assert rope <= {(*c.shape[1:4], c.shape[6]) for c in plan(get("rotary_embedding"), None, PLAN, salt=SALT)}


def test_paged_attention_runs_every_head_dim_the_served_families_have():
    """A fourth stop 46 attacker's kernel took only head_dim // 32 * 32 dimensions of q.k: every head_dim the plan ran
    was a multiple of 32, and Phi-2 serves 80 (rotary_embedding.SERVED_HEADS, the one list of served families)."""
    from autotune.targets.rotary_embedding import SERVED_HEADS

    planned = {c.shape[3] for c in plan(get("paged_attention"), None, PLAN, salt=SALT)}
    assert {h[2] for h in SERVED_HEADS} | {int(p.head_dim) for p in PRESETS} <= planned, planned


def test_values_and_weights_reach_the_magnitudes_a_clamp_would_cut():
    """A fourth stop 46 attacker's kernels clamped paged attention's V to +-7 and linear's weights to 8 standard
    deviations: N(0, 1) and N(0, 1/K) never reach either. Served values differ in size token by token, and trained
    weights have outliers."""
    gen = torch.Generator().manual_seed(0)
    v = get("paged_attention").make_inputs((4, 8, 2, 64, 16, 5, 300), torch.float32, gen, "normal")[2]
    assert v.abs().amax() > 16 and (v.abs().amax(-1) < 4).any()
    n, k = 256, 4096
    w = get("linear").make_inputs((8, n, k), torch.float32, gen, "normal")[1]
    assert (w.abs() > 8 * k ** -0.5).sum() > 100 and w.std() < 2 * k ** -0.5


def test_served_sizes_run_large_together_where_a_kernel_may_branch_on_both():
    """A stop 48 attacker's kernels went wrong only where two sizes met, each large in some case and never together:
    a GEMM at M >= 128 with K past 1024, a paged attention in steps of 32 sequences or more past one key tile on kv
    heads other than 0, a fused MoE with more than 128 pairs on one expert (no case had more than 62)."""
    cases = plan(get("linear"), None, PLAN, salt=SALT)
    assert any(c.shape[0] >= 512 and c.shape[2] >= 4096 for c in cases)
    paged = [c.shape for c in plan(get("paged_attention"), None, PLAN, salt=SALT)]
    assert any(s[0] >= 1024 and s[2] > 1 and s[6] > 256 for s in paged), paged
    moe = get("fused_moe")
    big = [c for c in plan(moe, None, PLAN, salt=SALT) if c.shape[0] >= 512]
    assert big
    ids = moe.make_inputs(big[0].shape, torch.float32, torch.Generator().manual_seed(0), "normal")[4]
    assert int(torch.bincount(ids.reshape(-1).long()).max()) > 256


def test_every_pair_of_cut_dims_runs_large_together():
    """A stop 48 attacker's kernels went wrong only where two sizes the CPU cut shrinks were large together, each
    large alone in some case: a softmax past 4M values, an int8 weight past 1024 x 1024, a fused MoE past 2 tokens
    with a hidden size of 1024 or more, a paged attention on kv heads past the first at contexts of 1536 or more.
    For every target, each pair of dims the cut shrinks in a served shape runs with both above the cut."""
    for target in all_targets():
        runs = [c.shape for c in plan(target, None, PLAN, salt=SALT) if c.source in ("together", "range")]
        for served in case_plan.served_shapes(target, None, PLAN):
            base = target.cut_shape(served, PLAN.max_interpreter_rows_extra, PLAN.max_interpreter_elements // 4)
            shrunk = [d for d, (b, s) in enumerate(zip(base, served)) if b < s]
            for i, j in itertools.combinations(shrunk, 2):
                assert any(r[i] > base[i] and r[j] > base[j] for r in runs), (target.name, served, i, j)
    assert any(numel(s) > 4 * 2 ** 20 and s[-1] >= 8192 for s in _together("softmax"))
    assert any(n >= 4096 and k >= 4096 for _, n, k in _together("int8_linear"))
    assert any(t >= 256 and h >= 2048 for t, _, _, h, _ in _together("fused_moe"))
    paged = _together("paged_attention")
    assert any(s[2] > 1 and s[5] >= 64 and s[6] >= 2048 for s in paged), paged
    assert any(s[0] >= 16 and s[2] > 1 and s[5] == 1 and s[6] >= 512 for s in paged), paged
    assert any(s[0] >= 2048 and s[1] >= 32 for s in _together("rotary_embedding"))
    assert any(s[2] == 8 and s[6] >= 4096 for s in paged), paged  # a stop 49 attacker's: kv head 0 past 2048 keys


def test_a_pair_also_runs_with_its_longest_dim_served_and_the_other_as_large_as_fits():
    """A round-9 attacker's paged attention read kv head h - 1 for sequences past the second at keys past 2048: the
    (sequences, context) pair was halved to 17 sequences at 512 keys, and 4096 keys ran with 2 sequences. The pair
    now also runs at its longest dim's served size with the other as large as the budget takes, not halved to a
    power of two: 3 sequences at 4096 keys (4 do not fit), a weight of 4096 x 8185 (K is odd)."""
    paged = _together("paged_attention")
    assert any(s[0] >= 3 and s[2] == 8 and s[6] >= 4096 for s in paged), paged
    assert any(n == 4096 and k > 8192 - 64 and k % 2 for _, n, k in _together("linear"))
    for target in all_targets():  # the other dim is as large as fits: one more does not
        for served in case_plan.served_shapes(target, None, PLAN):
            base = target.cut_shape(served, PLAN.max_interpreter_rows_extra, PLAN.max_interpreter_elements // 4)
            shrunk = [d for d, (b, s) in enumerate(zip(base, served)) if b < s]
            for pair in itertools.combinations(shrunk, 2):
                corner = case_plan._corner(target, tuple(base), served, pair, PLAN)
                if corner is None:
                    continue
                (d, e), more = sorted(pair, key=lambda d: -served[d] / base[d]), list(corner)
                if corner[d] != served[d]:  # made callable (Target.coherent: no more query rows than keys)
                    assert target.coherent(corner) == corner and corner[d] < served[d], (target.name, corner)
                    continue
                more[e] += 1
                assert corner[e] == served[e] or (
                    sum(target.io_elements(tuple(more))) > PLAN.together_values
                    or target.flops(tuple(more), torch.float32) > PLAN.together_flops), (target.name, corner)


def test_a_dim_halved_to_fit_grows_back_to_the_largest_size_that_fits():
    """A round-10 attacker's SiLU-and-mul went wrong past row 1024 at widths of 3000 or more: every wide served
    step was halved to 1024 rows to fit the together budget. The last dim halved grows back as far as the budget
    takes: 1820 of 2048 rows at 6144 wide. For every target and dim, a run short of the served size is at the
    budget's edge (one more does not fit)."""
    assert any(rows > 1024 and width >= 3000 for rows, width in _together("silu_and_mul"))
    for target in all_targets():
        for served in case_plan.served_shapes(target, None, PLAN):
            base = tuple(target.cut_shape(served, PLAN.max_interpreter_rows_extra,
                                          PLAN.max_interpreter_elements // 4))
            for d in (d for d, (b, s) in enumerate(zip(base, served)) if b < s):
                run = case_plan._together(target, base, served, (d,), PLAN)
                if run is None or run[d] >= served[d]:
                    continue
                more = (*run[:d], run[d] + 1, *run[d + 1:])
                assert tuple(target.coherent(more)) == run or (  # made callable: no more query rows than keys
                    sum(target.io_elements(more)) > PLAN.together_values
                    or target.flops(more, torch.float32) > PLAN.together_flops), (target.name, served, run)


def test_layouts_and_scalar_values_take_turns_at_served_sizes_too():
    """A stop 49 attacker's RMSNorm ignored the row stride and its fused add-RMSNorm the eps argument only past 256
    rows: the layouts and eps values ran on the cut cases alone, every range case contiguous at the default eps."""
    big = [c for c in plan(RMS, None, PLAN, salt=SALT) if c.shape[0] >= 2048]
    assert {c.layout for c in big} == set(RMS.layouts), {c.layout for c in big}
    fused = get("fused_add_rms_norm")
    eps = {dict(c.scalars).get("eps") for c in plan(fused, None, PLAN, salt=SALT) if c.shape[0] >= 2048}
    assert eps - {None} == set(case_plan.scalar_values(fused, PLAN)["eps"]), eps  # None: make_inputs' own
    first = {}  # a range shape's first case runs as served: contiguous, make_inputs' scalars (the dry calls' launches)
    for c in plan(get("paged_attention"), None, PLAN, salt=SALT):
        if c.source in ("range", "together"):
            first.setdefault(c.shape, c)
    assert all(c.layout == "contiguous" and c.scalars == () for c in first.values())


@pytest.mark.parametrize("target", all_targets(), ids=lambda t: t.name)
def test_the_largest_sizes_meet_every_layout_in_the_served_dtype(target):
    """Two round-9 attackers ignored a stride only in bf16 at served sizes: a fused add-RMSNorm's padded rows past
    256 rows of 2048 wide, a paged attention's vLLM cache view past 2048 keys. The turns had left bf16 dense at
    every range shape (its first case, run as served) and every together case. Now each together shape and the
    served call run whole meet every view the target declares (its strided layouts), in bf16."""
    cases = plan(target, None, PLAN, salt=SALT)
    largest = {c.shape for c in cases if c.source == "together"} | {
        s for s in [case_plan.served_whole(target, None, PLAN)] if s is not None}
    assert largest, target.name
    for shape in largest:
        met = {c.layout for c in cases if c.shape == shape and c.dtype == torch.bfloat16}
        views = set(target.layouts) - set(DENSE_LAYOUTS) - ({"padded"} if len(shape) < 2 else set())
        assert "contiguous" in met and views <= met, (shape, met)
        first = next(c for c in cases if c.shape == shape)
        assert first.layout == "contiguous" and first.scalars == ()  # the served call first, as a dry call made it


def _together(name: str) -> list[tuple[int, ...]]:
    cases = plan(get(name), None, PLAN, salt=SALT)
    assert all(c.dtype == torch.bfloat16 for c in cases if c.source == "together"), name  # the served dtype
    return [c.shape for c in cases if c.source in ("together", "range")]


def test_the_verdict_names_the_largest_served_sizes_that_ran_together_only_smaller():
    """Within the budget an 8192-token step of 32 query heads runs together at 4096 tokens and fewer heads at most:
    the note names the served step and what ran, so a pass is not read as covering it (where it is not the largest
    served call run whole: the default's budget runs that one whole since round 12)."""
    step = dataclasses.replace(PLAN, served_rows=8192, served_whole_work=1 << 26)
    note = notes.together_note(get("rotary_embedding"), None, step)
    ran = [int(n) for n in re.findall(r" as \[tokens=(\d+), heads=32,", note)]
    assert "[tokens=8192, heads=32, kv_heads=8, head_dim=128" in note and ran and max(ran) < 8192, note
    assert "[M_tokens=2048, N_out=28672, K_in=4096] as [" in notes.together_note(get("linear"), None, PLAN)
    assert notes.together_note(get("rms_norm"), None, PLAN) == ""  # its largest call runs whole


def test_the_verdict_says_that_vllms_larger_steps_are_not_judged_at_fewer_served_rows():
    """vLLM on an H100/H200 puts up to 8192 tokens in a step (its API server's max_num_batched_tokens there); the
    plan is served at serve.max_batched_tokens (2048, autotune's own engine): the verdict says so, and how to judge
    those steps, on a GPU as on the CPU."""
    note = notes.beyond_note(RMS, PLAN)
    assert "steps of more than 2048 tokens" in note and "serve.max_batched_tokens=8192" in note, note
    assert notes.beyond_note(RMS, dataclasses.replace(PLAN, served_rows=8192)) == ""
    paged = notes.beyond_note(get("paged_attention"), PLAN)
    assert get("paged_attention").beyond_domain[0] in paged and "steps of more than 2048" in paged


def test_the_quick_plan_runs_no_sizes_together():
    quick = plan_config(compose(["verify=quick"]).verify)
    assert not case_plan.together_shapes(get("linear"), None, quick)
    assert all(c.source != "together" for c in plan(get("linear"), None, quick, salt=SALT))
    ranged = [c for c in plan(RMS, None, quick, salt=SALT) if c.source == "range"]  # nor layouts' turns there
    assert ranged and all(c.layout == "contiguous" and c.scalars == () for c in ranged)


def test_decode_contexts_are_drawn_per_call_and_often_at_a_key_tiles_edge():
    """A stop 48 attacker's split-context path was right only for the longest sequence, and another's decode dropped
    its own newest key at contexts of 1 mod 128: a decode's context (but the longest's) is drawn per call, up to the
    blocks the shape gives it, half of them at a tile's edge; a decode-only step's first reaches past half the
    longest."""
    paged = get("paged_attention")
    shape = (64, 4, 2, 32, 16, 1, 600)
    lens = [paged.make_inputs(shape, torch.float32, torch.Generator().manual_seed(i), "normal")[4] for i in range(4)]
    assert all(int(c[-1]) == 600 and int(c.max()) == 600 for c in lens)
    assert not torch.equal(lens[0], lens[1])
    every = torch.cat([c[:-1] for c in lens]).long()
    near = ((every + 1) % 16 <= 2).float().mean()  # within a key of a multiple of 16: 3 in 16 drawn uniformly
    assert near > 0.4 and bool((every % 128 == 1).any()), near
    first = [int(paged.make_inputs((2, 2, 1, 32, 16, 1, 8190), torch.float32, torch.Generator().manual_seed(i),
                                   "normal")[4][0]) for i in range(16)]
    assert max(first) > 4096 and len(set(first)) > 8


def test_random_sizes_are_drawn_per_run_and_avoid_round_numbers():
    draws = [contract_shapes(RMS, PLAN, bytes([i]) * 16) for i in range(8)]
    assert len({tuple(d) for d in draws}) > 1  # the salt decides them
    for shapes in draws:
        random = [s for s, source in shapes if source == "random"]
        widths, rows = {s[-1] for s in random}, {s[0] for s in random if len(s) == 2}
        assert any(w > 1024 and w % 32 for w in widths)  # a 1024-wide loop has a tail
        assert any(w > 1024 and (w - 1) & (w - 2) and w & (w - 1) for w in widths)  # not a power of two
        assert any(w < 1024 and w % 2 for w in widths)
        assert all(32 < r < 64 and r % 32 for r in rows)  # a row block of 32 has a tail
        assert {len(s) for s in random} == {1, 2, 3}  # [hidden], [tokens, hidden], [batch, tokens, hidden]
    cases = plan(RMS, None, PLAN, salt=SALT)
    assert any(c.shape[0] > 32 and c.shape[0] % 32 and c.source == "random" for c in cases)  # survives the cut


def test_leading_dims_one_two_and_three():
    ranks = {len(c.shape) for c in plan(RMS, None, PLAN, salt=SALT)}
    assert ranks == {1, 2, 3}


def test_layouts_and_eps_take_turns_over_the_cases():
    cases = [c for c in plan(RMS, None, PLAN, salt=SALT) if c.source not in ("range", "together")]  # served first
    assert {c.layout for c in cases} == set(RMS.layouts) == {"contiguous", "offset0", "padded"}
    assert {dict(c.scalars)["eps"] for c in cases} == {1e-6, 1e-5} | {float(p.rms_norm_eps) for p in PRESETS}
    for layout in RMS.layouts:  # every layout meets every eps, every dtype and the NaN inputs
        mine = [c for c in cases if c.layout == layout]
        assert {c.scalars for c in mine} == {c.scalars for c in cases}
        assert {c.dtype for c in mine} == {torch.float32, torch.bfloat16, torch.float16}


def test_layouts_are_made_as_declared():
    by_layout = {}
    for c in plan(RMS, None, PLAN, salt=SALT):
        if len(c.shape) == 2 and c.shape[0] > 1:
            by_layout.setdefault(c.layout, c)
    padded = make_data(RMS, by_layout["padded"], SALT)
    x = padded.args[0]
    assert x.stride(0) > x.shape[1] and x.stride(1) == 1 and not x.is_contiguous()
    assert torch.isnan(x.as_strided((x.shape[0] - 1, x.stride(0) - x.shape[1]), (x.stride(0), 1), x.shape[1])).all()
    torch.testing.assert_close(RMS.reference(*padded.args), padded.reference[0], equal_nan=True)  # same values
    assert not by_layout["offset0"].front_guard and by_layout["contiguous"].front_guard
    rope = get("rotary_embedding")
    fused = [c for c in plan(rope, None, PLAN, salt=SALT) if c.layout == "qkv"]
    assert fused
    for c in fused:
        _, q, k, *_ = make_data(rope, c, SALT).args
        _, heads, kv_heads, head_dim, *_ = c.shape
        width = (heads + 2 * kv_heads) * head_dim  # q, k and the v heads of one projection row
        assert q.stride() == k.stride() == (width, head_dim, 1) and q.untyped_storage() is not None
        assert (q.storage_offset(), k.storage_offset()) == (0, heads * head_dim) and not c.front_guard
        assert q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr()  # one buffer, as served
        v_heads = q.as_strided((q.shape[0], kv_heads * head_dim), (width, 1), (heads + kv_heads) * head_dim)
        assert torch.isnan(v_heads).all()


def test_small_rows_make_eps_matter_in_every_dtype():
    """A kernel with eps fixed at 1e-5 must fail the eps=1e-6 cases, in bf16 too."""
    for c in plan(RMS, None, PLAN, salt=SALT):
        if c.scalars == (("eps", 1e-6),) and c.kind == "normal" and c.shape == (7, 1000):
            data = make_data(RMS, c, SALT)
            other = RMS.reference(data.args[0], data.args[1], 1e-5)
            tol = RMS.tolerances[c.dtype]
            assert ((other.double() - data.reference[0].double()).abs()
                    > tol.atol + tol.rtol * data.reference[0].double().abs()).any(), c.label
            weight = data.args[1].float()
            assert weight.std() > 0.5 and (weight < 0).any()  # far from all ones


def test_a_target_declares_only_what_it_has():
    with pytest.raises(ValueError, match="layouts"):
        dataclasses.replace(RMS, layouts=("sideways",))
    with pytest.raises(ValueError, match="mutates names"):
        dataclasses.replace(RMS, mutates=("out",))
    for target in all_targets():  # the row-wise ops get the model's widths and drawn sizes; every op its layouts
        assert target.layouts, target.name
        if target.op_class is OpClass.MEMORY_BOUND:
            assert target.model_shapes and target.random_shapes, target.name


def test_profile_shapes_replace_the_defaults_and_keep_their_calls():
    cases = plan(RMS, [((2048, 4096), "bfloat16", 640)], PLAN, salt=SALT)
    profiled = [c for c in cases if c.source == "profile"]
    assert profiled and all(c.calls == 640 and c.requested_shape == (2048, 4096) for c in profiled)
    assert not any(c.source == "default" for c in cases)
    assert "[2048, 4096] -> [64, 4096]" in cut_note(RMS, [((2048, 4096), "bfloat16", 640)], PLAN)


def test_inputs_are_reproducible_within_a_run_and_secret_across_runs():
    case = next(c for c in plan(RMS, None, PLAN, salt=SALT) if c.refill)
    a, b = make_data(RMS, case, SALT), make_data(RMS, case, SALT)
    assert torch.equal(a.args[0], b.args[0]) and torch.equal(a.reference[0], b.reference[0])
    assert not torch.equal(a.args[0], a.refill_args[0])
    assert a.golden[0].dtype == torch.float64
    other = make_data(RMS, case, b"another run salt")
    assert not torch.equal(a.args[0], other.args[0])  # the public facts of a case no longer make its inputs


def test_every_target_makes_data_for_every_planned_case_kind():
    for name in ("silu_and_mul", "fused_add_rms_norm", "rotary_embedding", "softmax"):
        target = get(name)
        cases = plan(target, None, PLAN, salt=SALT)
        for case in {(c.kind, c.dtype, c.layout): c for c in cases if c.shape_numel < 5000}.values():
            data = make_data(target, case, SALT)
            assert all(r.dtype == case.dtype for r in data.reference)
            assert all(g.dtype == torch.float64 for g in data.golden)


def test_profile_shapes_are_capped_to_the_extremes_and_the_most_called():
    from autotune.records import ProfiledShape
    from autotune.verify.plan.cases import select_profile_shapes
    from autotune.verify.plan.notes import selection_note

    calls = {1: 50, 2: 40, 3: 30, 7: 9, 9: 8, 11: 7, 13: 6, 17: 1, 64: 5, 100: 2}
    shapes = [ProfiledShape((rows, 128), "float32", c) for rows, c in calls.items()]
    chosen = select_profile_shapes(shapes, 4)
    assert [s.shape[0] for s in chosen] == [1, 2, 3, 100]  # smallest and largest, then the most called
    assert select_profile_shapes(shapes, 0) == shapes and select_profile_shapes(shapes, 10) == shapes
    note = selection_note(shapes, 4)
    assert "4 of 10" in note and f"{(50 + 40 + 30 + 2) / 158:.0%}" in note
    assert selection_note(shapes, 10) == ""


@pytest.mark.parametrize("name", ["paged_attention", "fused_moe"])
def test_range_cases_keep_every_served_value(name):
    """The greedy cover keeps every value each served shape's range cuts take in each dim."""
    target = get(name)
    served = {tuple(r) for s in case_plan.served_shapes(target, None, PLAN) for r in target.range_cuts(s)}
    chosen = [run for _, run in case_plan.range_shapes(target, None, dataclasses.replace(PLAN, max_range_shapes=0))]
    assert set(chosen) <= served
    for d in range(len(next(iter(served)))):
        assert {r[d] for r in served} <= {r[d] for r in chosen}, d


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_a_non_finite_input_reaches_only_its_own_row_of_the_reference(dtype):
    """As a GPU's GEMM computes it (and fp64): oneDNN's bf16 GEMM on some CPUs put NaN in the row before too,
    which rejected correct kernels for "NaN swallowed"."""
    gen = torch.Generator().manual_seed(0)
    x, weight = torch.randn(67, 71, generator=gen).to(dtype), torch.randn(69, 71, generator=gen).to(dtype)
    x[15, 6], x[40, 3] = float("inf"), float("nan")
    reference, golden = answers(get("linear"), (x, weight))
    rows = lambda mask: mask.any(1).nonzero().flatten().tolist()
    assert rows(reference[0].isnan()) == [40] and rows(reference[0].isinf()) == [15]
    assert torch.equal(reference[0].isnan(), golden[0].isnan()) and torch.equal(reference[0].isinf(), golden[0].isinf())


def test_an_explicit_zero_in_the_config_stays_zero():
    """verify.range_programs=0 means every program of a range case runs; it once became 2 in the code's default."""
    zero = plan_config(compose(["verify.range_programs=0", "verify.range_whole_work=0", "verify.long_calls=0"]).verify)
    assert zero.range_programs == 0 and zero.long_calls == 0
    ranged = [c for c in plan(RMS, None, zero, salt=SALT) if c.source == "range"]
    assert ranged and all(c.sample == 0 for c in ranged)
    assert not any(c.long for c in plan(RMS, None, zero, salt=SALT))
    two = plan_config(compose(["verify.range_programs=2", "verify.range_whole_work=0",
                               "verify.served_whole_work=0"]).verify)
    assert {c.sample for c in plan(RMS, None, two, salt=SALT) if c.source == "range"} == {2}


def test_the_plan_reads_its_presets_from_the_config_it_is_given():
    """No file is read by the plan: presets passed in are the presets used."""
    alone = dataclasses.replace(PLAN, presets=())
    assert not any(source == "model" for _, source in contract_shapes(RMS, alone, SALT))
    assert any(source == "model" for _, source in contract_shapes(RMS, PLAN, SALT))
    odd = dataclasses.replace(PLAN, presets=({"hidden_size": 1234, "intermediate_size": 4000, "num_heads": 2,
                                               "num_kv_heads": 2, "head_dim": 64, "rms_norm_eps": 1e-6},))
    assert 1234 in {c.shape[-1] for c in plan(RMS, None, odd, salt=SALT)}


def test_the_gpu_plan_runs_no_range_case_and_cuts_nothing():
    cases = plan(RMS, None, GPU_PLAN, salt=SALT)
    assert not any(c.source == "range" or c.sample for c in cases)
    assert all(c.shape == c.requested_shape for c in cases)


def test_the_long_run_of_calls_ends_the_plan_on_its_cheapest_shape():
    """A wrong kernel fails on the other cases before the checker pays for thousands of calls."""
    cases = plan(RMS, None, PLAN, salt=SALT)
    assert [c.index for c in cases] == list(range(len(cases)))
    assert [bool(c.long) for c in cases] == [False] * (len(cases) - 1) + [True]
    assert cases[-1].long >= PLAN.long_calls and numel(cases[-1].shape) == min(numel(c.shape) for c in cases)


def test_probes_raise_one_dim_alone_to_its_served_value_and_its_power_of_two_bucket():
    moe = get("fused_moe")
    served = (512, 128, 8, 2048, 768)
    cut = moe.cut_shape(served, PLAN.max_interpreter_rows, PLAN.max_interpreter_elements)
    probes = followup.probe_shapes(moe, served, PLAN)
    assert (257, *cut[1:]) in probes and (512, *cut[1:]) in probes  # next_power_of_2 is 512 over 257..512
    assert (*cut[:3], 1025, cut[4]) in probes and (*cut[:4], 768) in probes and (*cut[:4], 513) in probes
    assert all(sum(a != b for a, b in zip(p, cut)) == 1 for p in probes)  # one dim raised at a time
    # a raise the op cannot take is left out: paged attention's heads raised alone leave a group that does not divide
    paged = get("paged_attention")
    calls = dry.probe_calls(paged, [((17, 32, 8, 128, 16, 2048, 4096), torch.float32)], PLAN)
    assert calls and all(s[1] % s[2] == 0 for s, _, _ in calls)
    # the cheapest probe that made a launch is the case, sampled where it is dear
    made = [[((512, *cut[1:]), torch.float32), ((257, *cut[1:]), torch.bfloat16), ((257, *cut[1:]), torch.float32)],
            []]  # two dtypes of one shape tie on work
    (case,) = followup.probe_cases(moe, made, PLAN, start=7)
    assert case.shape == (257, *cut[1:]) and case.index == 7 and case.source == "probe" and case.sample


def test_coverage_runs_a_served_shapes_cut_first_and_its_range_cases_only_after():
    """A served shape whose launches no planned case ran: its ordinary cut (a specialisation on a size the cut keeps,
    head_dim or a dtype, runs there), then, for launches the cut did not make either, its range cases (one on a
    size the cut shrinks: tokens)."""
    moe = get("fused_moe")
    served = [((512, 128, 8, 2048, 768), torch.bfloat16), ((512, 128, 8, 2048, 768), torch.bfloat16)]
    cuts = followup.coverage_cases(moe, served, PLAN, start=3)
    assert [(c.shape, c.source, c.index, c.sample) for c in cuts] == [
        (moe.cut_shape(served[0][0], PLAN.max_interpreter_rows, PLAN.max_interpreter_elements), "coverage", 3, 0)]
    ranged = followup.coverage_cases(moe, served, PLAN, start=4, cut=False)
    assert [c.shape for c in ranged] == list(dict.fromkeys(tuple(r) for r in moe.range_cuts(served[0][0])))
    assert all(c.source == "range" and c.dtype == torch.bfloat16 for c in ranged) and ranged[0].index == 4


def test_the_largest_served_call_runs_uncut_with_every_program_where_it_fits():
    """A kernel that launches one program too few past a step's size (an attacker's rms_norm, rows - 1 programs past
    4M values) is wrong only at its largest calls, where a sample cannot see a row no program wrote: where that call
    fits `verify.served_whole_work`, a range case runs it uncut and whole, in the dtype served at that size (bf16:
    every preset serves it, and only the presets reach that size)."""
    largest = max(case_plan.served_shapes(RMS, None, PLAN), key=numel)
    assert numel(largest) >= 2048 * 4096
    ranged = [c for c in plan(RMS, None, PLAN, salt=SALT) if c.source == "range" and c.shape == largest]
    assert {c.dtype for c in ranged} == {torch.bfloat16} and all(c.sample == 0 for c in ranged)
    assert "the largest call" not in notes.whole_note(RMS, plan(RMS, None, PLAN, salt=SALT),
                                                         case_plan.served_shapes(RMS, None, PLAN))
    off = dataclasses.replace(PLAN, served_whole_work=0)
    assert not any(c.shape == largest and c.source == "range" for c in plan(RMS, None, off, salt=SALT))
    silu = get("silu_and_mul")  # Llama 3's [2048, 28672]: a round-12 attacker's grid went wrong past 2^25 values only
    assert case_plan.served_whole(silu, None, PLAN) == max(case_plan.served_shapes(silu, None, PLAN), key=numel)
    linear = get("linear")  # 2048 x 28672 x 4096 is past any CPU budget: the verdict names it instead
    linear_largest = max(case_plan.served_shapes(linear, None, PLAN), key=numel)
    assert case_plan.served_whole(linear, None, PLAN) != linear_largest
    assert "the largest call" in notes.whole_note(linear, plan(linear, None, PLAN, salt=SALT),
                                                      case_plan.served_shapes(linear, None, PLAN))


def test_verify_models_narrows_the_presets_by_name_and_refuses_an_unknown_one():
    assert config.chosen_presets("all") == config.model_presets()
    assert [p["name"] for p in config.chosen_presets(OmegaConf.create(["tiny", "llama3_8b"]))] == ["tiny", "llama3_8b"]
    narrowed = PlanConfig.from_config(CFG, presets=config.chosen_presets(["qwen2_5_0_5b"]), served_rows=2048)
    sizes = {case.shape[1:4] for case in plan(get("paged_attention"), None, narrowed, SALT) if case.source == "model"}
    assert sizes == {(14, 2, 64), (2, 1, 32)}  # Qwen2.5-0.5B's heads, kv heads and head_dim, and its
    # longest context on one kv head; no other model's
    for bad in (["llama_9000"], [], "some"):
        with pytest.raises(config.UserError, match=r"verify.models=.*give all, or a list of model presets from \["):
            config.chosen_presets(bad)


def _layout(args) -> list:
    return [(tuple(a.shape), a.stride(), a.dtype) if isinstance(a, torch.Tensor) else type(a) for a in args]


@pytest.mark.parametrize("target", sorted(all_targets(), key=lambda t: t.name), ids=lambda t: t.name)
def test_a_dry_calls_arguments_have_the_layouts_a_real_call_gets(target):
    """The dry calls' stand-ins (large tensors left unfilled, their layouts worked out without the values) have the
    shapes, strides and dtypes make_inputs gives, at each served shape of up to 4M input values (bigger ones are
    only planned, never made, here)."""
    gen = torch.Generator()
    checked = 0
    for shape, dtype in case_plan.served_calls(target, None, PLAN):
        if (target.input_elements or numel)(shape) <= 1 << 22:
            real = target.make_inputs(shape, dtype, gen.manual_seed(0), "normal")
            assert _layout(dry.layout_of(target, shape, dtype)) == _layout(real), (shape, dtype)
            checked += 1
    assert checked


def test_dry_calls_import_no_torch_dynamo():
    """Making the dry calls' stand-ins takes no meta kernel written in Python (randn, elementwise ops, cat): those
    import torch._dynamo, 2 s of each judging. Rotary's make draws, computes elementwise and joins; paged
    attention's permutes and indexes."""
    import subprocess
    import sys
    code = ("import sys\nfrom tests.verify.test_cases import PLAN\nfrom autotune.targets import all_targets\n"
            "from autotune.verify.plan.dry import dry_calls\n"
            "for t in all_targets():\n    if t.name in ('rotary_embedding', 'paged_attention'):\n"
            "        for _ in dry_calls(t, None, PLAN): pass\n"
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    assert out.stdout.strip() == "False", out.stderr[-2000:]


def test_a_sample_too_slow_to_run_again_whole_runs_whole_at_a_smaller_size():
    """A fused MoE's together case [682 tokens, 4096 hidden] whose sample compared nothing (the down GEMM reads the
    gate/up GEMM's sorted tiles) would take minutes whole: it runs whole with its dims above the cut halved until
    its FLOPs fit `verify.rerun_within_s` at the sample's pace, and never down to the cut the ordinary cases ran."""
    moe = get("fused_moe")
    assert PLAN.rerun_within_s == 20
    sampled = case_plan.Case(7, (682, 8, 2, 4096, 64), torch.bfloat16, "normal", 0, "together",
                             (2048, 8, 2, 4096, 14336), layout="offset0", sample=2)
    smaller = followup.smaller_whole_case(moe, sampled, 180.0, PLAN, 40)
    assert smaller is not None and smaller.index == 40 and smaller.sample == 0 and smaller.source == "together"
    assert (smaller.requested_shape, smaller.dtype, smaller.layout) == (sampled.requested_shape, torch.bfloat16,
                                                                       "offset0")
    ratio = moe.flops(smaller.shape, torch.float32) / moe.flops(sampled.shape, torch.float32)
    assert 180.0 * ratio <= 20 < 180.0 * ratio * 2.5  # fits, and not far below what fits
    base = moe.cut_shape(sampled.requested_shape, PLAN.max_interpreter_rows_extra,
                         PLAN.max_interpreter_elements // 4)
    assert smaller.shape[0] > base[0] and smaller.shape[3] > base[3]  # both dims still above the cut
    # however slow, a step above the cut: the cut itself ran in the ordinary cases
    tiny = followup.smaller_whole_case(moe, sampled, 1e9, PLAN, 40)
    assert tiny is not None and tuple(tiny.shape) != tuple(base) and all(t >= b for t, b in zip(tiny.shape, base))
    assert sum(t > b for t, b in zip(tiny.shape, base)) == 1


def test_every_drawn_count_runs_on_every_target():
    """Each count `step_counts` draws runs as a step of every target whose shapes follow the count, in a preset whose
    runs fit the budget (the fused MoE's counts 5 to 23 had been dropped whenever Mixtral's shape was drawn), and
    paged attention's up to vLLM's max_num_seqs."""
    for target in all_targets():
        counts = steps.step_counts(case_plan.run_rng(target, b"salt" + b"steps"), PLAN.served_rows)
        drawn = case_plan.drawn_steps(target, PLAN, b"salt")
        most = 1024 if target.name == "paged_attention" else PLAN.served_rows  # past it a step is no larger
        assert len(drawn) == len([n for n in counts if n < most]), (target.name, counts, drawn)


def test_the_drawn_counts_cover_each_octave_odd_and_padded():
    """Every count up to 8 runs, and every octave of a step's counts from 8 to the served rows gets an odd count, one
    an engine pads a batch to (vLLM's CUDA-graph sizes: multiples of 8, of 16 from 256 to 512, where a multiple of 8
    that is not of 16 runs too) and another even one; each drawn per run."""
    draws = [steps.step_counts(random.Random(seed), 2048) for seed in range(200)]
    for counts in draws:
        assert counts[:8] == list(range(1, 9)) and {16, 32, 64} <= set(counts)
        for low in (8, 16, 32, 64, 128, 256, 512, 1024):
            inside = [n for n in counts if low < n <= 2 * low]
            assert any(n % 2 for n in inside), counts
            assert low == 8 or any(n % 8 == 0 and n & (n - 1) for n in inside), counts
            assert any(n % 2 == 0 and n % 8 for n in inside), counts
            assert low != 256 or any(n % 16 == 0 and n & (n - 1) for n in inside), counts  # graphs of 16s there
            assert low != 256 or any(n % 16 == 8 for n in inside), counts
    assert steps.step_counts(random.Random(0), 5) == [1, 2, 3, 4, 5]  # none past the served rows
    assert len({tuple(c) for c in draws}) == len(draws)  # a draw, not a list
