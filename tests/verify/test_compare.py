"""The comparison gate: assert_close's rule, NaN/Inf placement, the fp64-golden fallback, evidence."""

import dataclasses
import re
from dataclasses import replace

import pytest
import torch

from autotune.targets import get
from autotune.targets.base import DEFAULT_TOLERANCES, Tolerance
from autotune.verify import protocol
from autotune.verify.judge.accuracy import bias
from autotune.verify.judge.compare import compare, evidence, judge_case
from autotune.verify.protocol import same_bits
from autotune.verify.plan import cases as C
from autotune.verify.plan import data as D

FP32, BF16 = DEFAULT_TOLERANCES[torch.float32], DEFAULT_TOLERANCES[torch.bfloat16]
RMS = get("rms_norm")
SALT_12 = bytes.fromhex("00112233445566778899aabbccddeeff")


def answers(x: torch.Tensor):
    return RMS.reference(x, torch.ones(x.shape[-1], dtype=x.dtype), 1e-5), \
        RMS.reference(x.double(), torch.ones(x.shape[-1], dtype=torch.float64), 1e-5)


def test_equal_output_passes_and_reports_zero_error():
    ref, gold = answers(torch.randn(4, 64))
    check = compare(ref.clone(), ref, gold, FP32)
    assert check.passed and check.max_abs_err == 0.0


def test_tolerance_is_atol_plus_rtol_times_expected():
    ref = torch.tensor([1.0, 100.0])
    gold = ref.double()
    inside = ref + torch.tensor([1e-5 + 1.2e-6, 1e-5 + 1.2e-4])
    outside = ref + torch.tensor([0.0, 1e-5 + 1.4e-4])
    # the reference as far from the exact answer as the candidate (else the RMSE bound of step 5 decides)
    assert compare(inside, ref, ((inside.double() + gold) / 2), FP32).passed
    check = compare(outside, ref, gold, FP32)
    assert not check.passed and "1 of 2 values differ" in check.note


@pytest.mark.parametrize("out, fragment", [
    (torch.zeros(1), "shape [1]"),
    (torch.zeros(4, 64, dtype=torch.float64), "dtype float64"),
    ([1.0], "list instead of a tensor"),
])
def test_structure_must_match_exactly(out, fragment):
    ref, gold = answers(torch.randn(4, 64))
    check = compare(out, ref, gold, FP32)
    assert not check.passed and fragment in check.note


def test_nan_and_inf_must_sit_where_the_reference_has_them():
    ref = torch.tensor([1.0, float("nan"), float("inf"), 2.0])
    gold = ref.double()
    assert compare(ref.clone(), ref, gold, FP32).passed
    swallowed = torch.tensor([1.0, 0.0, float("inf"), 2.0])
    assert "NaN swallowed" in compare(swallowed, ref, gold, FP32).note
    invented = torch.tensor([float("nan"), float("nan"), float("inf"), 2.0])
    assert "NaN at 1 positions" in compare(invented, ref, gold, FP32).note
    overflow = torch.tensor([1.0, float("nan"), float("inf"), float("inf")])
    assert "overflow" in compare(overflow, ref, gold, FP32).note
    wrong_sign = torch.tensor([1.0, float("nan"), float("-inf"), 2.0])
    assert "+-Inf differ" in compare(wrong_sign, ref, gold, FP32).note


def test_golden_fallback_passes_a_reordered_sum_but_not_lower_precision():
    x = torch.randn(8, 4096)
    ref, gold = answers(x)
    # fp32 math in another summation order: as accurate as the reference against fp64
    reordered = (x.double() * torch.rsqrt((x.double() ** 2).mean(-1, keepdim=True) + 1e-5)).float()
    assert compare(reordered, ref, gold, FP32).passed
    # the same math done in bf16 and returned as fp32: far less accurate than the reference
    lowered = answers(x.bfloat16())[0].float()
    check = compare(lowered, ref, gold, FP32)
    assert not check.passed and "fp64-golden fallback failed" in check.note


def test_golden_fallback_tolerates_a_one_ulp_bf16_difference():
    x = torch.randn(4, 1000).bfloat16()
    ref, gold = answers(x)
    nudged = ref.clone()
    nudged[0, 0] = torch.nextafter(ref[0, 0].float(), torch.tensor(9.0)).bfloat16()
    assert compare(nudged, ref, gold, BF16).passed


def test_the_fallbacks_largest_error_is_weighed_with_each_values_own_tolerance():
    """A correct fp32 flash attention (the example's online softmax) put one output of 11.73 at 3.3e-5 off the fp64
    answer where the reference's largest error was 7.2e-6: past rtol there and past twice the reference's worst, one
    value's last rounding decided the case. Each value may now be off by k times the reference's worst plus its own
    tolerance; two tolerances more still fails."""
    gen = torch.Generator().manual_seed(0)
    gold = torch.randn(64, 128, generator=gen, dtype=torch.float64) * 4
    gold[5, 7] = 11.7338
    ref = gold.float()  # rounded: half a unit in the last place at most
    ref[5, 7] = gold[5, 7] + 7.2e-6
    close, far = ref.clone(), ref.clone()
    close[5, 7] = gold[5, 7] + 3.4e-5
    far[5, 7] = gold[5, 7] + 8e-5
    assert compare(close, ref, gold, FP32).passed
    check = compare(far, ref, gold, FP32)
    assert not check.passed and "fp64-golden fallback failed" in check.note, check.note


def test_integer_outputs_are_exact_or_off_by_one_in_the_declared_share():
    ref = torch.randint(-127, 128, (100, 100), generator=torch.Generator().manual_seed(0)).to(torch.int8)
    quant = get("fused_add_rms_norm_quant").tolerances[torch.bfloat16]  # int_off_by_one 1e-3: 10 of 10,000
    golden = ref.double()  # not consulted for integers
    nudged = ref.clone().flatten()
    nudged[:10] += torch.where(nudged[:10] < 127, 1, -1).to(torch.int8)
    assert compare(ref.clone(), ref, golden, FP32).passed
    assert not compare(nudged.view(100, 100), ref, golden, FP32).passed  # no share declared: exact only
    ok = compare(nudged.view(100, 100), ref, golden, quant)
    assert ok.passed and "10 of 10000 integers off by one" in ok.note
    more = nudged.clone()
    more[10] += 1 if more[10] < 127 else -1
    assert "11 of 10000 integers off by one, more than the 10 allowed" in compare(more.view(100, 100), ref, golden,
                                                                                   quant).note
    two = ref.clone().flatten()
    two[0] = two[0] + 2 if two[0] < 126 else two[0] - 2
    assert "differ by more than one" in compare(two.view(100, 100), ref, golden, quant).note
    assert "dtype int32" in compare(ref.int(), ref, golden, quant).note


def test_same_bits_sees_nan_payloads_and_signed_zero():
    a = torch.tensor([0.0, float("nan")])
    assert same_bits(a, a.clone())
    assert not same_bits(a, torch.tensor([-0.0, float("nan")]))
    assert not same_bits(a, a.double())
    wide = torch.randn(40)
    for start in (0, 1, 3):  # views at an offset no 8-byte word starts at: compared all the same
        view = wide[start:start + 16]
        assert same_bits(view, view.clone()) and not same_bits(view, view + 1)


def test_degenerate_and_null_passing_cases_are_not_evidence():
    case = C.Case(0, (4, 64), torch.float32, "normal", 0, "edge", (4, 64))
    data = D.make_data(RMS, case)
    assert evidence(data, FP32) == (True, "")
    constant = D.CaseData(args=(torch.ones(4, 64), torch.ones(64), 1e-5),
                          reference=(torch.ones(4, 64),), golden=(torch.ones(4, 64, dtype=torch.float64),))
    assert not evidence(constant, FP32)[0]
    tiny = torch.full((4, 64), 1e-7)
    zero_ok = D.CaseData(args=(tiny,), reference=(tiny * torch.linspace(0, 1, 64),),
                         golden=((tiny * torch.linspace(0, 1, 64)).double(),))
    counted, why = evidence(zero_ok, FP32)
    assert not counted and "null candidate (zeros)" in why


def clones(args) -> list:
    return [a.clone() if isinstance(a, torch.Tensor) else None for a in args]


def evidence_for(data, outputs, repeat=None, refill=None, inputs_after=None, **fields) -> protocol.CaseEvidence:
    """The device's evidence for a case whose calls returned `outputs` (and `repeat`/`refill`: (outputs, inputs
    after) of those calls, or their outputs alone with the inputs left as made)."""
    def call(given, args):
        if given is None:
            return None
        outs, after = given if isinstance(given, tuple) else (given, clones(args))
        return protocol.CallOutcome(outs, after)

    plain = dict(output_types=["Tensor"] * len(outputs), launches=[1], output_strides=[], aliased=[], reused=[],
                 clobbered=False, guards_broken=[], torch_ops={}, long_calls=0, long_differs=None)
    return protocol.CaseEvidence(index=0, first=call((outputs, inputs_after or clones(data.args)), data.args),
                                 repeat=call(repeat, data.args), refill=call(refill, data.refill_args),
                                 **{**plain, **fields})


def first(ev, **changed):
    return replace(ev, first=replace(ev.first, **changed))


def again(ev, **changed):
    return replace(ev, repeat=replace(ev.repeat, **changed))


def refilled(ev, **changed):
    return replace(ev, refill=replace(ev.refill, **changed))


def test_judge_case_checks_mutation_aliasing_repeat_and_refill():
    case = C.Case(0, (3, 64), torch.float32, "normal", 0, "edge", (3, 64), repeat=True, refill=True)
    data = D.make_data(RMS, case, b"salt")
    good = evidence_for(data, list(data.reference), repeat=list(data.reference), refill=list(data.refill_reference))
    result, nondeterministic = judge_case(RMS, case, data, good, FP32)
    assert result.passed and not nondeterministic and result.evidence

    mutated = first(good, inputs_changed=[0])  # the device found x changed
    assert "modified its input `x`" in judge_case(RMS, case, data, mutated, FP32)[0].note
    aliased = replace(good, aliased=[[0, 0]])
    assert "shares memory with input `x`" in judge_case(RMS, case, data, aliased, FP32)[0].note
    stale = refilled(good, outputs=list(data.reference))
    assert "returned the previous answer" in judge_case(RMS, case, data, stale, FP32)[0].note
    wobble = data.reference[0].clone()
    wobble[0, 0] = torch.nextafter(wobble[0, 0], torch.tensor(9.0))
    result, nondeterministic = judge_case(RMS, case, data, again(good, outputs=[wobble]), FP32)
    assert not result.passed and nondeterministic and "two calls on the same inputs differ bitwise" in result.note
    atomic = dataclasses.replace(RMS, atomic_tolerance={torch.float32: FP32})  # a split-K sum's order, declared
    result, nondeterministic = judge_case(atomic, case, data, again(good, outputs=[wobble]), FP32)
    assert result.passed and nondeterministic and "non-deterministic (atomics)" in result.note
    tight = dataclasses.replace(RMS, atomic_tolerance={torch.float32: Tolerance(rtol=0.0, atol=1e-9)})
    assert "atomic-reduction bound" in judge_case(tight, case, data, again(good, outputs=[wobble]), FP32)[0].note
    counted = replace(good, long_differs=2048, long_calls=3000)
    assert "call 2049 of 3000 on the same inputs" in judge_case(RMS, case, data, counted, FP32)[0].note


def test_a_tensor_subclass_or_other_object_is_named_in_the_failure():
    case = C.Case(0, (3, 64), torch.float32, "normal", 0, "edge", (3, 64))
    data = D.make_data(RMS, case, b"salt")
    ev = evidence_for(data, [None], output_types=["LazyTensor"])
    result, _ = judge_case(RMS, case, data, ev, FP32)
    assert not result.passed and "returned a LazyTensor, not a plain torch.Tensor" in result.note


def test_outputs_must_be_fresh_and_contiguous():
    case = C.Case(0, (3, 64), torch.float32, "normal", 0, "edge", (3, 64))
    data = D.make_data(RMS, case, b"salt")
    good = evidence_for(data, list(data.reference), output_strides=[[64, 1]])
    assert judge_case(RMS, case, data, good, FP32)[0].passed
    ring = replace(good, reused=[[0, 0]])  # the worker saw output 0 overlap an output it still holds
    assert "shares memory with another output" in judge_case(RMS, case, data, ring, FP32)[0].note
    wide = replace(good, output_strides=[[80, 1]])  # a view of a wider buffer
    assert "strides [80, 1]" in judge_case(RMS, case, data, wide, FP32)[0].note
    one_row = C.Case(0, (1, 64), torch.float32, "normal", 0, "edge", (1, 64))
    data = D.make_data(RMS, one_row, b"salt")
    assert judge_case(RMS, one_row, data, evidence_for(data, list(data.reference), output_strides=[[999, 1]]),
                      FP32)[0].passed  # a dim of size 1 may have any stride


def test_declared_in_place_writes_are_checked_and_others_forbidden():
    from tests.verify.inplace_target import TARGET as INPLACE

    case = C.Case(0, (5, 96), torch.float32, "normal", 0, "edge", (5, 96), repeat=True, refill=True)
    data = D.make_data(INPLACE, case, b"salt")
    x, residual, weight, eps = data.args
    assert torch.equal(data.written[1], (x + residual))  # the reference's in-place result, on a copy
    assert data.written[0] is None and torch.equal(residual, data.args[1])  # the inputs stay as made
    after = [x.clone(), data.written[1].clone(), weight.clone(), None]
    refill_after = [data.refill_args[0].clone(), data.refill_written[1].clone(), data.refill_args[2].clone(), None]
    good = evidence_for(data, list(data.reference), repeat=(list(data.reference), after),
                        refill=(list(data.refill_reference), refill_after), inputs_after=after)
    assert judge_case(INPLACE, case, data, good, FP32)[0].passed
    forgot = first(good, inputs_after=[x.clone(), residual.clone(), weight.clone(), None])
    assert "in-place write to `residual` is wrong" in judge_case(INPLACE, case, data, forgot, FP32)[0].note
    stale_refill = refilled(good, inputs_after=after)
    note = judge_case(INPLACE, case, data, stale_refill, FP32)[0].note
    assert "after a refill" in note
    wrote_x = again(good, inputs_changed=[0])
    note = judge_case(INPLACE, case, data, wrote_x, FP32)[0].note
    assert "modified its input `x`" in note and "only to: `residual`" in note and "(second call)" in note



def test_a_sampled_case_is_answered_after_its_run_at_the_rows_its_programs_wrote():
    """A paged-attention range case's reference is made after its run, only at the query rows the drawn programs
    wrote (targets' rows_problem): right values there pass, one wrong value there fails, and the rows nobody
    wrote are not compared; a sample that wrote most rows gets the whole reference."""
    paged = get("paged_attention")
    shape = (17, 4, 1, 64, 16, 300, 600)
    case = C.Case(0, shape, torch.bfloat16, "normal", 0, "range", shape, sample=1)
    data = D.make_data(paged, case, b"salt")
    assert data.rows_pending and data.reference == ()  # nothing computed before the run
    whole = D.expected(paged, data.args).reference[0]
    written = torch.zeros(whole.shape, dtype=torch.bool)
    written[40:56, 2:] = True  # a drawn program's block of a prefill chunk's rows, two of its heads
    out = torch.where(written, whole, torch.zeros_like(whole))  # the skipped programs wrote nothing
    ev = evidence_for(data, [out], output_valid=[written])
    result, _ = judge_case(paged, case, data, ev, BF16)
    assert result.passed and result.evidence, result.note
    [(other,)] = D.answer_rows(paged, data, [written]).alternate()  # the other product order's, made so too
    assert other[:40].isnan().all() and not other[40:56].isnan().any()
    wrong = out.clone()
    wrong[47, 3, 5] = 2 * wrong[47, 3, 5] + 1.0  # off by the value itself: v's rows come at drawn scales
    result, _ = judge_case(paged, case, data, evidence_for(data, [wrong], output_valid=[written]), BF16)
    assert not result.passed and "1 of 2048 values differ" in result.note
    most = torch.zeros(whole.shape, dtype=torch.bool)
    most[:-3] = True
    result, _ = judge_case(paged, case, data, evidence_for(data, [whole.clone()], output_valid=[most]), BF16)
    assert result.passed, result.note

def test_an_output_ill_conditioned_in_its_products_rounding_is_held_to_the_worse_of_two_valid_orders():
    """fp32 paged attention at scale 32^-0.5, q rows at drawn scales up to 16: logits near 100, where one unit in
    the last place of a score moves its probability by 64 of its own, so which way each product rounds decides the
    output's error. On a suite run's draw ATen's blocked sums happened to round well (max error 4.6e-6) and the
    exact sums rounded once (an MMA's order, the example kernel's) did not (3.5e-5): the example was rejected (the
    salt below is a draw of that kind, drawn again each time the block tables changed). The reference's error is now the
    worse of the two orders' at each value; a scale 0.01% off fails.
    Which way ATen's sums round depends on the CPU's kernels (on an AMD EPYC they rounded as badly), so the
    premise is made with the luckiest reference there is, the fp64 answer rounded once to fp32."""
    paged = get("paged_attention")
    shape = (2, 32, 8, 128, 16, 1, 512)
    scalars = (("scale", 32 ** -0.5), ("window", 4096.0))
    case = C.Case(0, shape, torch.float32, "normal", 0, "range", shape, layout="offset0", scalars=scalars)
    data = D.make_data(paged, case, bytes.fromhex("83679bf8768b1e0ff474c999e68e7e98"))
    (ref,), (golden,) = data.reference, data.golden
    (exact,) = D.exact_reference(paged, data.args)
    tol = paged.tolerances[torch.float32]
    lucky = golden.to(torch.float32)
    assert not compare(exact, lucky, golden, tol).passed  # against a reference that rounded well alone
    for reference in (lucky, ref):
        check = compare(exact, reference, golden, tol, lambda: [exact])
        assert check.passed, check.note
    result, _ = judge_case(paged, case, data, evidence_for(data, [exact.clone()]), tol)
    assert result.passed, result.note
    off = D.with_scalars(paged, data.args, (("scale", 32 ** -0.5 * 1.0001),))
    (wrong,) = D.exact_reference(paged, off)
    assert not compare(wrong, ref, golden, tol, lambda: [exact]).passed


def test_a_fused_moe_that_rounds_its_intermediates_where_other_kernels_do_is_held_to_the_worst_placement():
    """A decode token routed to one expert of 40 intermediate values (a suite run's draw, replayed): the search
    template rounds the gate/up output and then SiLU x up once, where the reference (vLLM's path) rounds the SiLU
    apart too. Each output row carries those 40 roundings, and on this draw the reference's were 4 times luckier
    (RMSE 0.023 against 0.096): the correct template failed the fallback. The reference's error is now the worst
    of its rounding placements at each value (Target.reference_variants), within k = 3: four times the errors fail."""
    from autotune.targets.fused_moe import experts

    moe = get("fused_moe")
    shape = (1, 1, 1, 32, 40)
    case = C.Case(0, shape, torch.bfloat16, "normal", 0, "edge", shape)
    data = D.make_data(moe, case, bytes.fromhex("3f10d460a9801c38c2707f8473e445ac"))
    (ref,), (golden,) = data.reference, data.golden
    template = experts(*data.args, stores=frozenset({"gate_up"}))
    tol = moe.tolerances[torch.bfloat16]
    assert not compare(template, ref, golden, tol).passed  # against the reference's own placement alone
    result, _ = judge_case(moe, case, data, evidence_for(data, [template.clone()]), tol)
    assert result.passed, result.note
    four = (golden + 4 * (template.double() - golden)).to(torch.bfloat16)
    assert not compare(four, ref, golden, tol, lambda: [a[0] for a in data.alternate()]).passed


def test_a_fused_moe_whose_tokens_lean_beyond_what_its_rounding_placements_do_is_a_systematic_bias():
    """A round-13 attacker's fused MoE rounded where the reference does and scaled each token of a bf16 decode step
    by about 1.011 (alternately 0.989 in larger steps): fused MoE's rows share a rounding, so no line lean is judged,
    and 1 to 4 rows are too few for the case-wide one. Each token's lean is now held to 4 times the largest of the
    reference's rounding placements' there (accuracy.shared_row_bias); the placements themselves pass."""
    from autotune.targets.fused_moe import experts

    moe = get("fused_moe")
    shape = (4, 16, 4, 512, 192)
    case = C.Case(0, shape, torch.bfloat16, "normal", 0, "edge", shape)
    data = D.make_data(moe, case, SALT_12)
    (ref,) = data.reference
    tol = moe.tolerances[torch.bfloat16]
    for stores in (frozenset({"gate_up"}), frozenset()):
        result, _ = judge_case(moe, case, data, evidence_for(data, [experts(*data.args, stores=stores)]), tol)
        assert result.passed, result.note
    for gains in ([1.014, 1.014, 1.014, 1.0084], [1.011, 0.989, 1.011, 0.989]):  # unsteady, or no case lean
        leaning = (ref.double() * torch.tensor(gains, dtype=torch.float64)[:, None]).to(torch.bfloat16)
        result, _ = judge_case(moe, case, data, evidence_for(data, [leaning]), tol)
        assert not result.passed and "systematic bias in" in result.note and "rounding placements" in result.note, \
            result.note


def test_tf32_reads_fp32_as_a_tensor_core_does_and_the_reference_takes_its_products_so():
    from autotune.verify.plan.data import tf32, tf32_reference

    x = torch.tensor([1.0 + 2.0 ** -12, -(1.0 + 2.0 ** -10 + 2.0 ** -11), float("nan"), float("inf"), 3.0])
    assert tf32(x)[:2].tolist() == [1.0, -(1.0 + 2.0 ** -10)]  # the 13 low bits dropped (toward zero)
    assert tf32(x)[2].isnan() and tf32(x)[3:].tolist() == [float("inf"), 3.0]
    from autotune.targets import get

    g = torch.Generator().manual_seed(0)
    a, w = torch.randn(8, 64, generator=g), torch.randn(16, 64, generator=g)
    (through,) = tf32_reference(get("linear"), (a, w))
    assert torch.equal(through, tf32(a) @ tf32(w).T)  # F.linear's product, its factors in TF32
    assert not torch.equal(through, a @ w.T)


def test_a_half_precision_output_that_leans_off_the_exact_answer_is_a_systematic_bias():
    """A stop 46 attacker's RMSNorm scaled its bfloat16 output by 1.01: within rtol (1.6e-2) at every value, 1% too
    large everywhere. Rounding to nearest leans neither way, and rounding toward zero half a unit: both pass."""
    gold = torch.randn(64, 256, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    ref = gold.to(torch.bfloat16)
    leaning = (gold * 1.01).to(torch.bfloat16)
    assert not compare(leaning, ref, gold, BF16).passed  # less accurate (step 5) before it leans (6)
    lean = bias(leaning.double(), ref.double(), gold, BF16, torch.bfloat16)
    assert "systematic bias" in lean and "1.0" in lean and "larger" in lean, lean
    slight = (gold * 1.0045).to(torch.bfloat16)  # within step 5's RMSE bound, not within the lean's
    check = compare(slight, ref, gold, BF16)
    assert not check.passed and "systematic bias" in check.note and "smaller" not in check.note, check.note
    assert not compare((gold * 0.9955).to(torch.bfloat16), ref, gold, BF16).passed
    toward_zero = (gold.float().view(torch.int32) & ~0xFFFF).view(torch.float32).to(torch.bfloat16)
    assert compare(toward_zero, ref, gold, BF16).passed
    assert compare(ref.clone(), ref, gold, BF16).passed
    few = compare(slight[:1, :128], ref[:1, :128], gold[:1, :128], BF16)  # too few values to tell a lean
    assert few.passed, few.note
    fp32 = compare((gold * (1 + 1e-6)).float(), gold.float(), gold, FP32)  # fp32: within its rtol is enough
    assert fp32.passed


def test_values_within_tolerance_that_all_spend_it_the_same_way_are_less_accurate():
    """A stop 46 attacker's softmax took 0.85e-5 (under atol 1e-5) off every probability: each value within
    tolerance, 7% of a long row's mass gone; its RMSNorm nudged every bf16 value 0.9% toward +Inf (no lean in
    magnitude: negative values shrink). Both fail the fallback's RMSE bound, which now holds where step 3 passes."""
    gen = torch.Generator().manual_seed(1)
    gold = torch.softmax(torch.randn(4, 8192, dtype=torch.float64, generator=gen), -1)
    ref = gold.float()
    bled = (gold - 0.85e-5 * (gold < 1e-3)).float()
    check = compare(bled, ref, gold, FP32)
    assert not check.passed and "less accurate than the reference" in check.note, check.note
    y = torch.randn(64, 256, dtype=torch.float64, generator=gen)
    nudged = (y + 0.009 * y.abs()).to(torch.bfloat16)
    check = compare(nudged, y.to(torch.bfloat16), y, BF16)
    assert not check.passed and "less accurate than the reference" in check.note, check.note
    reordered = (y.float() + torch.randn(64, 256, generator=gen) * 1e-7).to(torch.bfloat16)  # rounding, not a lean
    assert compare(reordered, y.to(torch.bfloat16), y, BF16).passed


def test_errors_put_in_a_few_rows_heads_or_channels_are_less_accurate_than_the_rest():
    """A third stop 46 attacker put its error where the case's RMSE and lean dilute it: 8e-6 (under atol) added to
    every probability of one softmax row in 128 (the row sums to 1.066 at 8192 keys), and one bfloat16 RMSNorm token
    in 32 made 0.8% too large. A kernel that computes in bfloat16 on purpose (Liger's RMSNorm, SwiGLU) is less accurate
    in every row alike, and passes."""
    gen = torch.Generator().manual_seed(2)
    gold = torch.softmax(2 * torch.randn(256, 8192, dtype=torch.float64, generator=gen), -1)
    bumped = gold.clone()
    bumped[77] += 8e-6
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        tol = DEFAULT_TOLERANCES[dtype]
        check = compare(bumped.to(dtype), gold.to(dtype), gold, tol)
        assert not check.passed and "1 of 256 rows" in check.note and "row 77" in check.note, check.note
        assert compare(gold.to(dtype), gold.to(dtype), gold, tol).passed

    x = torch.randn(64, 1024, dtype=torch.float64, generator=gen) * 2.0 ** torch.randint(-4, 6, (64, 1), generator=gen)
    w = 1 + 0.1 * torch.randn(1024, dtype=torch.float64, generator=gen)
    golden = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    ref = golden.to(torch.bfloat16)
    heavy = golden.clone()
    heavy[13::32] *= 1.008
    check = compare(heavy.to(torch.bfloat16), ref, golden, BF16)
    assert not check.passed and "2 of 64 rows" in check.note, check.note

    b = x.to(torch.bfloat16)  # every operation rounded to bfloat16, as Liger's kernel does on purpose
    in_bf16 = b * torch.rsqrt(b.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(torch.bfloat16) * w.to(torch.bfloat16)
    check = compare(in_bf16, ref, golden, BF16)
    assert check.passed, check.note
    fma = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float())  # another order
    assert compare(fma, golden.float(), golden, FP32).passed
    channel = golden.clone()
    channel[:, 13::32] *= 1.008  # one hidden channel in 32 of every token
    check = compare(channel.to(torch.bfloat16), ref, golden, BF16)
    worst = re.search(r"index (\d+) is off", check.note)
    assert not check.passed and "32 of 1024 slices at one index of dimension 1" in check.note, check.note
    assert worst and int(worst[1]) % 32 == 13, check.note
    heads = golden.reshape(512, 8, 16).clone()  # [T, H, D]: rows of 16 values are too short to judge one by one
    heads[:, 5] *= 1.008  # one head in 8
    check = compare(heads.to(torch.bfloat16), ref.reshape(heads.shape), golden.reshape(heads.shape), BF16)
    assert not check.passed and "1 of 8 slices at one index of dimension 1" in check.note, check.note
    assert "index 5 is off" in check.note, check.note


def test_an_fp32_line_of_small_values_spends_no_more_than_a_few_units_in_their_last_place():
    """A stop 48 attacker added 4.4e-6 to every fp32 probability of one softmax row in 32 (the row sums to 1.009 at
    2048 keys): under half of atol at every value, which was the line's floor. A line's floor is now at most
    2048 units in the last place of its RMS size; a correct kernel that sums in another order (a few units) passes."""
    gen = torch.Generator().manual_seed(5)
    gold = torch.softmax(torch.randn(64, 2048, dtype=torch.float64, generator=gen), -1)
    ref = gold.float()
    leak = gold.clone()
    leak[30::32] += 4.4e-6
    check = compare(leak.float(), ref, gold, FP32)
    assert not check.passed and "2 of 64 rows of the last dimension" in check.note, check.note
    ulp = torch.finfo(torch.float32).eps
    reordered = (gold * (1 + 4 * ulp * torch.randn(gold.shape, dtype=torch.float64, generator=gen))).float()
    check = compare(reordered, ref, gold, FP32)
    assert check.passed, check.note


def test_a_lean_in_a_step_of_few_tokens_is_a_systematic_bias_unless_each_token_carries_its_own_rounding():
    """A stop 48 attacker's RMSNorm scaled bf16 outputs by 1.005 only in steps of fewer than 8 tokens, where the
    lean was not judged (too few rows to tell a scale from a token's shared rounding). A scale leans alike in every
    piece of even one token. Where each row shares one rounding of an intermediate (fused MoE's activation), rows
    that lean apart pass and a scale over 3 rows or more still fails."""
    gen = torch.Generator().manual_seed(6)
    for rows in (1, 2, 4):
        gold = torch.randn(rows, 4096, dtype=torch.float64, generator=gen)
        check = compare((gold * 1.005).to(torch.bfloat16), gold.to(torch.bfloat16), gold, BF16)
        assert not check.passed and "systematic bias" in check.note, (rows, check.note)
        assert compare(gold.to(torch.bfloat16), gold.to(torch.bfloat16), gold, BF16).passed
    shared = replace(BF16, rows_share_rounding=True)
    gold = torch.randn(4, 2048, dtype=torch.float64, generator=gen)
    apart = gold * torch.tensor([1.009, 1.002, 1.008, 1.001], dtype=torch.float64)[:, None]  # 0.5% on average
    assert compare(apart.to(torch.bfloat16), gold.to(torch.bfloat16), gold, shared).passed
    assert not compare((gold * 1.005).to(torch.bfloat16), gold.to(torch.bfloat16), gold, shared).passed
    assert compare((gold[:1] * 1.005).to(torch.bfloat16), gold[:1].to(torch.bfloat16), gold[:1], shared).passed


def test_ordinary_tokens_that_lean_or_are_noisy_beside_a_large_one_are_incorrect():
    """A round-12 attacker's SiLU-and-mul and fused add-RMSNorm made every bf16 token of ordinary size 1.45% too large
    when the step held a large one: the case's lean, weighted by magnitude, is the large tokens' (under 0.1%). Each
    row, and each channel in units of its rows' sizes, leans on its own (accuracy._line_bias). Noise of +-1.45%
    instead puts some values beyond rtol, and the fallback's lines in half precision may spend half of the
    tolerance at their RMS size over k times the reference's (accuracy.FALLBACK_HALF_FLOOR). Rounding to nearest,
    toward zero, and arithmetic in bf16 (two roundings a value, as Liger's SwiGLU) pass; where a row shares one rounding,
    rows that lean apart pass (the test below)."""
    gen = torch.Generator().manual_seed(12)
    gold = torch.randn(512, 1024, dtype=torch.float64, generator=gen)
    gold[::8] *= 256.0  # one token in eight 256 times larger
    ordinary = torch.ones(512, 1, dtype=torch.float64)
    ordinary[::8] = 0.0
    ref = gold.to(torch.bfloat16)
    rows = (gold * (1 + 0.0145 * ordinary)).to(torch.bfloat16)
    assert not compare(rows, ref, gold, BF16).passed  # its lines spend 0.9 tolerances behind the fallback, too
    lean = bias(rows.double(), ref.double(), gold, BF16, torch.bfloat16)
    assert "systematic bias in 448 of 512 rows of the last dimension" in lean, lean  # not the case's ("bias: ")
    assert re.search(r"row \d+ is 1\.4\d% larger", lean), lean
    channels = (gold * (1 + 0.0145 * ordinary * (torch.arange(1024) < 64))).to(torch.bfloat16)  # 64 channels
    assert not compare(channels, ref, gold, BF16).passed
    lean = bias(channels.double(), ref.double(), gold, BF16, torch.bfloat16)
    assert "of 1024 slices at one index of dimension 1" in lean, lean
    toward_zero = (gold.float().view(torch.int32) & ~0xFFFF).view(torch.float32).to(torch.bfloat16)
    signs = torch.where(torch.rand(gold.shape, generator=gen) < 0.5, -1.0, 1.0).double()
    noisy = (gold * (1 + 0.0145 * ordinary * signs)).to(torch.bfloat16)  # no lean: noise, some values beyond rtol
    check = compare(noisy, ref, gold, BF16)
    assert not check.passed and "though the fp64-golden fallback passed" in check.note, check.note
    for fine in (ref.clone(), toward_zero):
        assert compare(fine, ref, gold, BF16).passed
    a, b, c = (torch.randn(512, 1024, generator=gen).to(torch.bfloat16) for _ in range(3))
    a[::8] *= 256.0
    exact = a.double() * b.double() * c.double()
    once = (a.float() * b.float() * c.float()).to(torch.bfloat16)
    assert compare(a * b * c, once, exact, BF16).passed  # torch's bf16 ops: each product rounded to bf16


def test_one_dominant_value_one_ulp_off_is_no_steady_lean_but_a_uniform_scale_is():
    """A suite run's search-template rotary kernel was refused on an fp16 NaN/Inf case: its key was one unit in the
    last place toward zero at one value far larger than the rest, which is most of the output's magnitude-weighted
    lean (0.03%, past a quarter of rtol), and the pieces' unweighted spread called that steady. Weighed by size, one
    piece is one piece; a scale of every value still leans steadily."""
    gen = torch.Generator().manual_seed(1)
    gold = torch.randn(2, 8, 128, dtype=torch.float64, generator=gen)
    gold[0, 3, 17] = 2000.0
    ref = gold.to(torch.float16)
    one_off = ref.clone()
    one_off[0, 3, 17] = torch.nextafter(ref[0, 3, 17], torch.tensor(0.0, dtype=torch.float16))
    fp16 = DEFAULT_TOLERANCES[torch.float16]
    assert bias(one_off.double(), ref.double(), gold, fp16, torch.float16) == ""
    assert compare(one_off, ref, gold, fp16).passed
    scaled = (gold * (1 - 6e-4)).to(torch.float16)  # every value 0.06% small: 0.6 rtol, in every row
    assert "systematic bias in 1" in bias(scaled.double(), ref.double(), gold, fp16, torch.float16)
    gold[0, 3, 17] = 0.5  # without the dominant value, the case's lean too
    scaled, ref = (gold * (1 - 6e-4)).to(torch.float16), gold.to(torch.float16)
    assert "systematic bias: the outputs are 0.06% smaller" in bias(scaled.double(), ref.double(), gold, fp16,
                                                                      torch.float16)


def test_a_decode_steps_channel_that_leans_within_every_per_value_bound_is_incorrect():
    """A round-14 attacker's RMSNorm pushed channel 17 of every token 5% away from zero in bf16 steps of fewer than
    32 tokens, capped at 0.5% of the row's largest value: within the fallback's absolute bounds (ruled by the
    largest values) and too few values for a line of 32. A channel of a few tokens is a line for its lean now
    (accuracy.LEAN_LINE_VALUES), its bound wider as its count falls; the same step computed right passes."""
    rms = get("rms_norm")
    tol = rms.tolerances[torch.bfloat16]
    caught = 0
    for i in range(12):
        case = C.Case(0, (8, 4096), torch.bfloat16, "normal", 0, "range", (8, 4096))
        data = D.make_data(rms, case, bytes([i]) * 16)
        x, w, eps = data.args
        (ref,), (gold,) = data.reference, data.golden
        y = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps) * w.float()
        assert compare(y.to(torch.bfloat16), ref, gold, tol).passed
        push = torch.minimum(0.05 * y.abs(), 0.005 * y.abs().amax(-1, keepdim=True)) * y.sign()
        y[:, 17] += push[:, 17]
        check = compare(y.to(torch.bfloat16), ref, gold, tol)
        caught += not check.passed
        assert check.passed or "slices at one index of dimension 1" in check.note, check.note
    assert caught >= 10, caught


def test_small_tokens_wiped_behind_the_fallback_are_less_accurate_but_a_rotation_in_bf16_passes():
    """A fourth stop 46 attacker's SiLU-and-mul zeroed every bf16 output below 2^-10 of the tensor's RMS: the zeros
    fail step 3, and the fallback's absolute RMSE, ruled by the largest tokens, passed them at 1.2x the reference's.
    Line by line, in units of the tolerance at each line's size, a wiped token is off by 60 tolerances. A rotation
    computed in bf16 (Liger's RoPE) cancels to near zero at some values, beyond tolerance there, and passes."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(64, 1024, dtype=torch.float64, generator=gen) * 2.0 ** (14 * torch.rand(64, 1, generator=gen) - 6)
    ref = x.to(torch.bfloat16)
    wiped = torch.where(x.abs() < 2.0 ** -10 * x.pow(2).mean().sqrt(), 0.0, x).to(torch.bfloat16)
    check = compare(wiped, ref, x, BF16)
    assert not check.passed and "fp64-golden fallback passed" in check.note and "rows of the last" in check.note, \
        check.note

    a, b = x[:, :512], x[:, 512:]
    angle = torch.rand(512, dtype=torch.float64, generator=gen) * 6.3
    cos, sin = angle.cos(), angle.sin()
    golden = torch.cat([a * cos - b * sin, b * cos + a * sin], -1)
    ab, bb, cb, sb = a.to(torch.bfloat16), b.to(torch.bfloat16), cos.to(torch.bfloat16), sin.to(torch.bfloat16)
    in_bf16 = torch.cat([ab * cb - bb * sb, bb * cb + ab * sb], -1)  # each product rounded to bf16, then the sum
    check = compare(in_bf16, golden.to(torch.bfloat16), golden, BF16)
    assert check.passed, check.note
    assert "fp64-golden fallback passed" in check.note, check.note  # beyond tolerance where it cancels


def test_ordinary_tokens_wiped_beside_a_massive_one_in_a_step_of_few_tokens_are_less_accurate():
    """A round-9 attacker's SiLU-and-mul zeroed every token of a step of fewer than 8 whose energy was negligible
    next to the step's largest: beside a token of massive activations (2000) the other three of [4, 28672] were all
    zeros, and the fallback's bounds, absolute and set by that token's rounding, passed them; 4 rows were too few to
    be judged as lines. Behind the fallback every line is judged: a wiped token is off by its whole size."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(4, 28672, dtype=torch.float64, generator=gen) * 0.3
    x[3] *= 2000 / 0.3 / x[3].abs().max()  # one token of massive activations
    ref = x.to(torch.bfloat16)
    wiped = ref.clone()
    wiped[:3] = 0
    check = compare(wiped, ref, x, BF16)
    assert not check.passed and "fp64-golden fallback passed" in check.note and "rows of the last" in check.note, \
        check.note
    check = compare(ref, ref, x, BF16)
    assert check.passed, check.note
    blurred = (x * (1 + 2.0 ** -9 * torch.randn(x.shape, dtype=torch.float64, generator=gen))).to(torch.bfloat16)
    check = compare(blurred, ref, x, BF16)  # twice bf16's rounding everywhere: less accurate, yet within a line's
    assert check.passed, check.note         # tolerance, as a kernel rounding once more in bf16 is


def test_most_values_off_beside_a_massive_one_are_not_excused_by_the_fallback():
    """A round-10 attacker's SiLU-and-mul moved every ordinary output of a decode token by +-42% beside one massive
    activation: the fallback's bounds, and a line's RMS units, are set by that value's rounding, and it passed at
    1.8 times the reference's RMSE. Most values of the case, or of a line, may not be beyond their own tolerance
    where the reference's are not; the same token rounded once more in bf16, or a rotation that cancels, passes."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 14336, dtype=torch.float64, generator=gen)
    x[1, 1234] = 3000.0 * 11.3  # a massive activation's output
    ref = x.to(torch.bfloat16)
    sign = torch.where(torch.arange(14336) % 2 == 0, 1.0, -1.0).double()
    ordinary = x.abs() < x.abs().max() / 256
    moved = torch.where(ordinary, x * (1 + 0.42 * sign), x).to(torch.bfloat16)
    check = compare(moved[1:2], ref[1:2], x[1:2], BF16)  # a decode step of that one token, the attacker's
    assert not check.passed and "in the case " in check.note, check.note
    row = torch.where(ordinary & (torch.arange(4)[:, None] == 1), x * (1 + 0.42 * sign), x).to(torch.bfloat16)
    check = compare(row, ref, x, BF16)  # only the massive activation's own token: a line
    assert not check.passed and "in row 1 " in check.note, check.note
    blurred = (x * (1 + 2.0 ** -9 * torch.randn(x.shape, dtype=torch.float64, generator=gen))).to(torch.bfloat16)
    check = compare(blurred, ref, x, BF16)
    assert check.passed, check.note


def test_a_minority_of_a_tokens_values_moved_within_a_massive_ones_allowance_is_less_accurate():
    """A round-11 attacker's SiLU-and-mul moved 40% of a decode token's ordinary outputs (alternate signs) by an
    amount set from the token's own rounding error: the massive value's (64 at 16384 in bf16) spread thin enough
    for the fallback's RMSE, fewer than half of the line for `mostly_beyond`, and the line's units at an RMS size the
    massive value set. The values of ordinary size are judged again without it; a correct rounding still passes."""
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(1, 14336, dtype=torch.float64, generator=gen) * 0.2
    x[0, 777] = 1056.0 + 0.37  # a super activation's output, off bf16's grid
    ref = x.to(torch.bfloat16)
    rounding = (ref.double() - x).pow(2).sum()
    moved_share = 0.4
    delta = float((6 * rounding / (moved_share * x.numel())).sqrt())
    col = torch.arange(x.shape[-1])
    sign = torch.where(col % 2 == 0, 1.0, -1.0).double()
    moved = torch.where((col % 5 < 2) & (x.abs() < 100), x + delta * sign, x).to(torch.bfloat16)
    old = compare(moved, ref, x, BF16)
    assert not old.passed and "at the values of ordinary size" in old.note, old.note
    assert (((moved.double() - x).abs() > 0.5 * x.abs()).sum()) > 500  # half again off, on hundreds of values
    blurred = (x * (1 + 2.0 ** -9 * torch.randn(x.shape, dtype=torch.float64, generator=gen))).to(torch.bfloat16)
    check = compare(blurred, ref, x, BF16)
    assert check.passed, check.note


def test_a_nan_the_reference_has_does_not_switch_off_the_accuracy_check():
    """Where the golden is NaN or Inf (a case with special values in its inputs) the values are left out of step 5;
    they once made its sums NaN, and a NaN bound passes everything."""
    gen = torch.Generator().manual_seed(4)
    gold = torch.softmax(torch.randn(64, 1024, dtype=torch.float64, generator=gen), -1)
    gold[3, 5] = float("nan")
    bled = gold - 0.85e-5 * (gold < 1e-3)
    check = compare(bled.float(), gold.float(), gold, FP32)
    assert not check.passed and "less accurate than the reference" in check.note, check.note
