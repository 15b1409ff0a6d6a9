"""Judging one case: the candidate's outputs (received from its process) against the judge's own answers.

The gate, per output (the rules of torch.testing and torch._dynamo named below, no new ones):
1. structure: a plain tensor of exactly the reference's shape and dtype (no broadcasting, no casting);
2. NaN and Inf: NaN exactly where the reference has NaN, +-Inf exactly where it has +-Inf (so a NaN is
   neither invented nor swallowed, and an fp16/bf16 accumulator that overflows on inputs in the
   hundreds shows as Inf where the reference is finite);
3. values: torch.testing.assert_close's rule |actual - expected| <= atol + rtol * |expected| at the
   target's tolerance for the dtype, computed in fp64; integers (a quantizer's output) exact, or off by one
   in at most the target's small share of them (`Tolerance.int_off_by_one`: rounding ties), no fallback;
4. if 3 fails, the fp64-golden fallback of torch._dynamo.utils.same: the case still passes when the
   candidate is no less accurate than the reference itself, both measured against the reference run
   in fp64: RMSE <= k * the reference's RMSE + atol / 10 and each value's error <= k * the reference's max
   error + its tolerance (atol + rtol * |golden|), k = 2 for fp32 and 3 for fp16/bf16 (dynamo's multipliers; the
   max error is added because RMSE can hide a few badly wrong elements). A kernel that does fp32 math in fp16
   fails it by orders of magnitude; one that only sums in another order passes.
5. if 3 passes, 4's RMSE bound still holds in units of each value's tolerance (`accuracy.less_accurate`), over the case
   and in every line (a row of the last dimension, a slice at one index of any dimension): within tolerance
   everywhere, and no less accurate than k times the reference, neither over all nor where a line concentrates its
   errors; where 3 failed and 4 passed, every line within its whole tolerance and k x k times the reference's, most
   values of the case and of each line within their own tolerance wherever the reference's are
   (`accuracy.mostly_beyond`), and 4 and 5 again on the values of ordinary size alone (`accuracy.ordinary`: a
   massive activation's rounding sets the absolute bounds for its whole row otherwise).
6. float16/bfloat16: no lean. Over the values where rtol rules, the outputs may not be larger (or smaller) in
   magnitude than the fp64 golden on average by more than a quarter of rtol (`accuracy.bias`): a uniform 1% scale passes
   step 3 at every value in bfloat16.
Steps 4-6 weigh the reference's own error against the golden; where a case would fail on it, the reference is
made again with each fp32 matrix product summed exactly and rounded once (an MMA's order: ATen's CPU GEMM sums in
blocks), and the reference's error at each value is the larger of the two's. Where an output is ill-conditioned in
its products' rounding (fp32 attention with logits near 100: a unit in the last place of a score moves its
probability by 64 of its own), which order the reference happened to use had decided: ATen's rounded well on one
draw, the MMA order's (the example paged attention kernel's) 7 times worse, and the example was rejected.
Then the case: outputs are contiguous (as the reference's are) and share memory neither with an input nor
with any other output of any call of the run (the worker keeps them all alive); after every call the inputs
the target declares in `mutates` hold the reference's in-place result (compared as outputs are) and every
other input is bitwise unchanged, and so are the NaN guard bands and padding around them (no out-of-bounds
store); a second call on the same inputs agrees bitwise (else: non-deterministic, reported), the same
buffers refilled with new values give the new answer, and a later call does not overwrite an earlier
call's output.

A case is evidence only when its reference output is not degenerate (constant, all zero) and the null
candidates (all zeros, a copy of the input) fail it; a case that is not evidence can still fail.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import torch

from autotune.targets.base import Target, Tolerance, dtype_name
from autotune.verify.judge.accuracy import (
    GOLDEN_MULTIPLIER,
    ORDINARY_SPAN,
    bias,
    count,
    less_accurate,
    mostly_beyond,
    ordinary,
    shared_row_bias,
)
from autotune.verify.plan.cases import Case
from autotune.verify.plan.data import CaseData, answer_rows, other_references, tf32_reference
from autotune.verify.protocol import CallOutcome, CaseEvidence, same_bits
from autotune.verify.verdict import CaseResult


@dataclasses.dataclass
class Check:
    passed: bool
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    note: str = ""


def compare(out, ref: torch.Tensor, golden: torch.Tensor, tol: Tolerance,
            alternate: Callable[[], list[torch.Tensor]] | None = None) -> Check:
    """Steps 1-4 of the gate for one output (and 5 and 6). `alternate`: the reference's other valid computations
    (data.other_references), made only where the case would fail on accuracy against the reference's own error
    (steps 4-6); then the reference's error at each value is the largest of theirs."""
    if type(out) is not torch.Tensor:
        return Check(False, note=f"returned {type(out).__name__} instead of a tensor")
    if out.shape != ref.shape:
        return Check(False, note=f"output shape {list(out.shape)} where the reference has {list(ref.shape)}")
    if out.dtype != ref.dtype:
        return Check(False, note=f"output dtype {dtype_name(out.dtype)} where the reference has "
                                 f"{dtype_name(ref.dtype)}")
    if ref.numel() == 0:  # a sample that wrote nothing of this output comparable alone (replay.repeat_sampled)
        return Check(True)
    if not ref.dtype.is_floating_point:
        return _compare_integers(out, ref, tol)
    special = _special_values(out, ref)  # in their own dtype: where NaN and Inf sit does not change in fp64
    if special:
        return Check(False, note=special)
    finite = torch.isfinite(ref)
    everywhere = bool(finite.all())
    if not everywhere and not finite.any():
        return Check(True, 0.0, 0.0)
    o, r = out.double(), ref.double()
    of, rf = (o.reshape(-1), r.reshape(-1)) if everywhere else (o[finite], r[finite])
    diff, mag = of.sub(rf).abs_(), rf.abs()
    max_abs = float(diff.max())
    max_rel = float(torch.where(mag > 0, diff / mag, 0.0).max())
    bad = diff > tol.atol + tol.rtol * mag
    g = golden.double()
    keep = finite & torch.isfinite(g) & torch.isfinite(o)  # the values steps 4 and 5 judge against the golden

    def against(own: torch.Tensor) -> Check:  # steps 4-6, the reference's error being `own`'s
        if not bad.any():
            worse = less_accurate(o, own, g, keep, tol, ref.dtype) or bias(o, own, g, tol, ref.dtype, keep)
            return Check(not worse, max_abs, max_rel, note=worse)
        golden_ok, golden_note = _golden_fallback(o, own, g, keep, tol, ref.dtype)
        if golden_ok:
            worse = (less_accurate(o, own, g, keep, tol, ref.dtype, within=False)
                     or mostly_beyond(o, own, g, keep, tol, ref.dtype) or bias(o, own, g, tol, ref.dtype, keep))
            plain = ordinary(g, keep) if not worse else None
            if plain is not None:  # again without the values far above their row's: they set the bounds above
                plain_ok, plain_note = _golden_fallback(o, own, g, plain, tol, ref.dtype)
                worse = (plain_note if not plain_ok else less_accurate(o, own, g, plain, tol, ref.dtype, within=False))
                worse = worse and (f"at the values of ordinary size (within {ORDINARY_SPAN}x their row's mean "
                                   f"magnitude; the larger set the whole case's bounds): {worse}")
            return Check(not worse, max_abs, max_rel, note=worse or golden_note)
        i = int(bad.nonzero()[0])
        first = f"e.g. {float(of[i]):.6g} where the reference has {float(rf[i]):.6g}"
        return Check(False, max_abs, max_rel,
                     note=f"{count(bad)} of {diff.numel()} values differ beyond rtol {tol.rtol:g} atol {tol.atol:g} "
                          f"({first}; {golden_note})")

    check = against(r)
    if not check.passed and alternate is not None:
        worst = r
        for other in alternate():
            other = other.double()
            worst = torch.where(torch.isfinite(other) & ((other - g).abs() > (worst - g).abs()), other, worst)
        check = against(worst)
    return check


def _compare_integers(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> Check:
    """Integer outputs (a quantizer's int8): exact, or off by one in at most a share `tol.int_off_by_one` of the
    values (at least one value when that share is not zero) and by no more anywhere. There is no fp64 golden
    to fall back on: the golden run skips the rounding to the input's dtype that the contract includes."""
    diff = (out.long() - ref.long()).abs()
    worst = int(diff.max()) if diff.numel() else 0
    off = count(diff > 0)
    allowed = max(1, int(tol.int_off_by_one * diff.numel())) if tol.int_off_by_one > 0 else 0
    if worst <= 1 and off <= allowed:
        return Check(True, float(worst), None, note=f"{off} of {diff.numel()} integers off by one" if off else "")
    i = int((diff > 0).flatten().nonzero()[0]) if off else 0
    first = f"e.g. {int(out.flatten()[i])} where the reference has {int(ref.flatten()[i])}"
    if worst > 1:
        return Check(False, float(worst), None,
                     note=f"{count(diff > 1)} of {diff.numel()} integers differ by more than one ({first})")
    return Check(False, float(worst), None,
                 note=f"{off} of {diff.numel()} integers off by one, more than the {allowed} allowed "
                      f"(int_off_by_one {tol.int_off_by_one:g}; {first})")


def _special_values(o: torch.Tensor, r: torch.Tensor) -> str:
    """'' when NaN and Inf sit exactly where the reference has them, else what is wrong."""
    o_nan, r_nan = torch.isnan(o), torch.isnan(r)
    if (o_nan & ~r_nan).any():
        return f"NaN at {count(o_nan & ~r_nan)} positions where the reference is not NaN"
    if (r_nan & ~o_nan).any():
        return f"{count(r_nan & ~o_nan)} values where the reference is NaN are not NaN (NaN swallowed)"
    o_inf, r_inf = torch.isinf(o), torch.isinf(r)
    if (o_inf & ~r_inf).any():
        return f"overflow: +-Inf at {count(o_inf & ~r_inf)} positions where the reference is finite"
    if (r_inf & (o != r)).any():
        return f"{count(r_inf & (o != r))} values where the reference is +-Inf differ from it"
    return ""


def _golden_fallback(o, r, g, mask, tol: Tolerance, dtype: torch.dtype) -> tuple[bool, str]:
    if not mask.any():
        return False, "no finite fp64 golden to fall back on"
    cand, own = (o - g)[mask], (r - g)[mask]
    rmse, ref_rmse = float(cand.pow(2).mean().sqrt()), float(own.pow(2).mean().sqrt())
    worst, ref_worst = float(cand.abs().max()), float(own.abs().max())
    k = GOLDEN_MULTIPLIER.get(dtype, 2.0)
    # each value within k times the reference's largest error plus its own tolerance there: one value's last
    # rounding at a large magnitude (a flash kernel's fp32 output of 11.7, 24 units in the last place off) does not
    # decide a correct kernel's case
    over = float((cand.abs() - k * ref_worst - tol.rtol * g[mask].abs()).max())
    ok = rmse <= k * ref_rmse + tol.atol / 10 and over <= tol.atol
    verdict = "passed" if ok else "failed"
    return ok, (f"fp64-golden fallback {verdict}: rmse {rmse:.3g} vs the reference's {ref_rmse:.3g}, "
                f"max error {worst:.3g} vs {ref_worst:.3g}, allowed {k:g}x and each value's tolerance")


def compare_all(outs, refs, goldens, tol: Tolerance, alternates: Callable[[], list[tuple]] | None = None) -> Check:
    """Every output of a call; the first failing one decides, the largest errors are reported. `alternates`: the
    reference's outputs by its other valid computations (compare), made once if at all."""
    if outs is None:
        return Check(False, note="returned nothing")
    if len(outs) != len(refs):
        return Check(False, note=f"returned {len(outs)} outputs where the reference returns {len(refs)}")
    made = functools.cache(alternates or list)

    def alternate(j: int) -> Callable[[], list[torch.Tensor]] | None:
        return (lambda: [a[j] for a in made()]) if alternates is not None else None

    checks = [compare(o, r, g, tol, alternate(j)) for j, (o, r, g) in enumerate(zip(outs, refs, goldens))]
    worst_abs = max((c.max_abs_err for c in checks if c.max_abs_err is not None), default=None)
    worst_rel = max((c.max_rel_err for c in checks if c.max_rel_err is not None), default=None)
    for j, c in enumerate(checks):
        if not c.passed:
            where = f"output {j}: " if len(checks) > 1 else ""
            return Check(False, worst_abs, worst_rel, note=where + c.note)
    notes = "; ".join(c.note for c in checks if c.note)
    return Check(True, worst_abs, worst_rel, note=notes)


def degenerate(refs: tuple[torch.Tensor, ...]) -> bool:
    """Every output constant or all zero over its finite values (or none finite)."""
    for r in refs:
        finite = torch.isfinite(r)
        values = r if bool(finite.all()) else r[finite]
        if values.numel() > 1 and float(values.max()) != float(values.min()):
            return False
    return True


def null_outputs(args: tuple, refs: tuple[torch.Tensor, ...]) -> dict[str, tuple]:
    """What a candidate that does no work would return: zeros, or (part of) its first input."""
    nulls = {"zeros": tuple(torch.zeros_like(r) for r in refs)}
    x = args[0]
    if isinstance(x, torch.Tensor):
        copies = []
        for r in refs:
            if x.shape[:-1] == r.shape[:-1] and x.shape[-1] >= r.shape[-1]:
                copies.append(x[..., :r.shape[-1]].to(r.dtype).clone())
        if len(copies) == len(refs):
            nulls["input copy"] = tuple(copies)
    return nulls


NULL_CHECK_VALUES = 1 << 18  # the values of each output a null candidate is compared at (evenly spaced)


def evidence(data: CaseData, tol: Tolerance) -> tuple[bool, str]:
    """Whether the case can tell a kernel from one that does nothing: its reference is not constant, and neither
    zeros nor a copy of the input pass it. A part of an output shows that as well as all of it, so the null
    candidates are compared at NULL_CHECK_VALUES evenly spaced values of each: on a served step's 8M values the two
    whole comparisons with the fp64 fallback were four times the candidate's own (17 s of rms_norm's default plan)."""
    if degenerate(data.reference):
        return False, "not evidence: the reference output is constant (or nowhere finite)"

    def spaced(ts) -> tuple:
        return tuple(t.reshape(-1)[::-(-t.numel() // NULL_CHECK_VALUES) or 1] for t in ts)

    refs, goldens = spaced(data.reference), spaced(data.golden)
    for name, outs in null_outputs(data.args, data.reference).items():
        if compare_all(spaced(outs), refs, goldens, tol).passed:
            return False, f"not evidence: a null candidate ({name}) passes it"
    return True, ""


# tl.dot input precisions at or above TF32's accuracy (Triton 3.9's names); one not listed is held to IEEE
REDUCED_FP32_DOTS = ("tf32", "tf32x3", "bf16x3", "bf16x6")
THROUGH_TF32 = ("fp32 through TF32 (tl.dot's default input_precision on NVIDIA): judged against the reference with "
                "its matrix products in TF32")


def judge_case(target: Target, case: Case, data: CaseData, ev: CaseEvidence,
               tol: Tolerance, fp32_dot: str = "tf32") -> tuple[CaseResult, bool]:
    """(the case's result, whether the candidate was non-deterministic on it). `fp32_dot` (verify.fp32_dot): "tf32"
    holds an fp32 case whose tl.dot ran below IEEE to the accuracy of the reference with TF32 matrix products (as
    torch.backends.cuda.matmul.allow_tf32 computes); "ieee" to the IEEE reference, like any other."""
    # an fp32 case whose every reduced dot is a TF32-class fp32 dot; one that also casts fp32 tiles down to
    # fp16/bf16 for a product (anywhere in the kernel: a dead TF32 dot excuses nothing) is held to IEEE
    reduced = case.dtype == torch.float32 and bool(ev.fp32_dots)
    tf32 = reduced and fp32_dot == "tf32" and set(ev.fp32_dots) <= set(REDUCED_FP32_DOTS)
    if data.rows_pending:  # a sampled range case: its answers at the rows its programs wrote
        data = answer_rows(target, data, ev.output_valid, tf32)
    elif tf32:
        data = dataclasses.replace(data, reference=tf32_reference(target, data.args), refill_reference=(
            tf32_reference(target, data.refill_args) if data.refill_args is not None else None),
            alternate=functools.partial(other_references, target, data.args, True))
    alternates: Callable[[], list[tuple]] | None = (  # made once if at all
        functools.cache(data.alternate) if data.alternate is not None else None)
    if ev.output_valid is not None:  # a range case: only what the sampled programs wrote is compared
        ev, data, alternates = _sampled(ev, data, alternates)
    counted, why_not = evidence(data, tol)
    result = CaseResult(shape=list(case.shape), dtype=dtype_name(case.dtype), kind=case.kind, seed=case.seed,
                        passed=False, rtol=tol.rtol, atol=tol.atol, evidence=counted, source=case.source,
                        layout=case.layout, scalars=dict(case.scalars))
    first = compare_all(ev.first.outputs, data.reference, data.golden, tol, alternates)
    result.max_abs_err, result.max_rel_err = first.max_abs_err, first.max_rel_err
    failure = None if first.passed else first.note
    odd = next((t for t in ev.output_types if t != "Tensor"), None)
    if odd is not None:  # the worker sends only plain tensors; say what the candidate really returned
        failure = f"returned a {odd}, not a plain torch.Tensor (subclasses and other objects are not accepted)"
    failure = failure or _structure_failure(target, data, ev, tol)
    if failure is None and target.reference_variants and alternates is not None:
        failure = _shared_rounding_lean(ev.first.outputs, data, alternates(), tol)
    nondeterministic = False
    if failure is None and case.repeat:
        again = ev.repeat.outputs if ev.repeat is not None else None
        nondeterministic = not all(same_bits(a, b) for a, b in zip(again or (), ev.first.outputs))
        second = compare_all(again, data.reference, data.golden, tol, alternates)
        failure = None if second.passed else f"a second call on the same inputs: {second.note}"
        failure = failure or (_repeat_failure(target, case, again, ev.first.outputs) if nondeterministic else None)
    if failure is None and case.refill:
        failure = _refill_failure(data, ev, tol, lambda: other_references(target, data.refill_args or (), tf32))
    if failure is None and ev.long_differs is not None:
        failure = (f"call {ev.long_differs + 1} of {ev.long_calls} on the same inputs launched or "
                   "returned differently from the first of that run (behaviour that depends on how often it was "
                   "called: state between calls)")
    result.passed = failure is None
    if failure and reduced and not tf32:
        failure += (f" (its tl.dot: {', '.join(ev.fp32_dots)}; verify.fp32_dot=ieee demands IEEE: pass "
                    "input_precision=\"ieee\")" if fp32_dot == "ieee" else
                    f" (its tl.dot in this fp32 case: {', '.join(ev.fp32_dots)}; held to IEEE, as a kernel that casts "
                    "fp32 tiles down for a product is)")
    if failure and ev.fused:
        failure += (" (this case fused each multiply feeding an add into one fma, as Triton's default "
                    "enable_fp_fusion compiles it on a GPU; the checker draws fused or unfused per case)")
    repeats = ("non-deterministic (atomics): two calls on the same inputs differ bitwise, within the target's "
               "atomic-reduction bound") if nondeterministic else ""
    notes = [failure] if failure else [first.note, repeats, THROUGH_TF32 if tf32 else "", why_not]
    result.note = "; ".join(n for n in [*notes, ev.sampled or ""] if n)
    return result, nondeterministic


def _shared_rounding_lean(outs, data: CaseData, others: list[tuple], tol: Tolerance) -> str | None:
    """accuracy.shared_row_bias over each output, against the reference and its other computations (`others`)."""
    for j, (o, r, g) in enumerate(zip(outs, data.reference, data.golden)):
        lean = shared_row_bias(o.double(), [r.double(), *(a[j].double() for a in others)], g.double(), tol, r.dtype)
        if lean:
            return f"output {j}: {lean}" if len(data.reference) > 1 else lean
    return None


def _sampled(ev: CaseEvidence, data: CaseData,
             alternates: Callable[[], list[tuple]] | None
             ) -> tuple[CaseEvidence, CaseData, Callable[[], list[tuple]] | None]:
    """The evidence, the answers and the reference's other computations cut to the output elements a range case's
    sampled programs wrote (each output of the reference's shape and dtype first: else it is compared whole, and
    fails as it should)."""
    outs, masks = ev.first.outputs, ev.output_valid or []
    if len(outs) != len(data.reference) or len(masks) != len(outs) or not all(
            isinstance(o, torch.Tensor) and isinstance(m, torch.Tensor) and o.shape == r.shape == m.shape
            and o.dtype == r.dtype for o, m, r in zip(outs, masks, data.reference)):
        return ev, data, alternates
    bools = [m.bool() for m in masks]

    def cut(ts) -> tuple:
        return tuple(t[m] for t, m in zip(ts, bools))

    ev = dataclasses.replace(ev, first=dataclasses.replace(ev.first, outputs=list(cut(outs))), output_strides=[])
    cut_alternates = (lambda: [cut(a) for a in alternates()]) if alternates is not None else None
    return ev, dataclasses.replace(data, reference=cut(data.reference), golden=cut(data.golden)), cut_alternates


def _repeat_failure(target: Target, case: Case, again, first) -> str | None:
    """A second call on the same inputs that differs bitwise from the first: a race, an output that depends on
    where it lies in memory, or state. Allowed only where the target declares an atomic reduction
    (`Target.atomic_tolerance`: a split-K sum with atomic adds lands in another order each time) and only
    within the bound it declares."""
    bound = target.atomic_tolerance.get(case.dtype) if target.atomic_tolerance else None
    if bound is None:
        return ("two calls on the same inputs differ bitwise (a race between programs, a result that depends on "
                "the output's address, or state; this target declares no atomic reduction that would excuse it, or "
                "verify.bitwise_repeats demands bitwise repeats)")
    for j, (a, b) in enumerate(zip(again, first)):
        if not same_bits(a, b) and not compare(a, b, b.double(), bound).passed:
            return (f"two calls on the same inputs differ by more than the target's atomic-reduction bound (rtol "
                    f"{bound.rtol:g}, atol {bound.atol:g}) in output {j}")
    return None


def _structure_failure(target: Target, data: CaseData, ev: CaseEvidence, tol: Tolerance) -> str | None:
    names = target.arg_names
    for j, i in ev.aliased:
        return f"output {j} shares memory with input `{names[i]}` (outputs must be fresh tensors)"
    for call, j in ev.reused:
        return (f"output {j} of call {call + 1} shares memory with another output of this or an earlier call, all "
                "of which the caller still holds (an output buffer kept and reused; outputs must be fresh tensors)")
    for j, (strides, ref) in enumerate(zip(ev.output_strides, data.reference)):
        if strides is not None and not _dense_row_major(ref.shape, strides):
            return (f"output {j} has strides {strides} for shape {list(ref.shape)}: the reference returns contiguous "
                    "tensors, and so must the kernel (torch.empty, not a view of a wider buffer)")
    calls = ((ev.first, data.args, data.written, data.written_golden, ev.inputs_written, ""),
             (ev.repeat, data.args, data.written, data.written_golden, None, " (second call)"),
             (ev.refill, data.refill_args, data.refill_written, data.refill_written_golden, None,
              " (after a refill)"))  # a range case's one call is sampled: only the first
    for call, before, written, golden, sampled, when in calls:
        if call is not None and before is not None:
            failure = _inputs_failure(target, before, written, golden, call, tol, sampled)
            if failure:
                return failure + when
    for i in ev.guards_broken:
        return f"wrote outside its input `{names[i]}` (an out-of-bounds store: the guard band around it changed)"
    if ev.clobbered:
        return "a later call overwrote the output of an earlier one (an output buffer reused across calls)"
    return None


def _inputs_failure(target: Target, before, written, golden, call: CallOutcome, tol: Tolerance,
                    sampled: list | None = None) -> str | None:
    """The inputs as the call left them: the declared in-place writes equal to the reference's (in a range case,
    where `sampled` says the sampled programs wrote), every other input bitwise unchanged."""
    names, after = target.arg_names, call.inputs_after
    for i, arg in enumerate(before):
        if not isinstance(arg, torch.Tensor):
            continue
        now = after[i] if i < len(after) else None
        if names[i] in target.mutates:
            ref, gold = written[i], golden[i]
            mask = sampled[i] if sampled is not None and i < len(sampled) else None
            if isinstance(now, torch.Tensor) and isinstance(mask, torch.Tensor) and mask.shape == now.shape == \
                    ref.shape:
                mask = mask.bool()
                now, ref, gold = now[mask], ref[mask], gold[mask]
            check = compare(now, ref, gold, tol)
            if not check.passed:
                return f"its in-place write to `{names[i]}` is wrong: {check.note}"
        elif i in call.inputs_changed:
            allowed = ", ".join(f"`{n}`" for n in target.mutates) or "none"
            return (f"modified its input `{names[i]}` (inputs must be left bitwise unchanged; the op may write "
                    f"in place only to: {allowed})")
    return None


def _dense_row_major(shape, strides) -> bool:
    """Whether `strides` are the contiguous strides of `shape` (dims of size 1 may have any stride)."""
    if len(strides) != len(shape):
        return False
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _refill_failure(data: CaseData, ev: CaseEvidence, tol: Tolerance,
                    alternates: Callable[[], list[tuple]]) -> str | None:
    outs = ev.refill.outputs if ev.refill is not None else None
    check = compare_all(outs, data.refill_reference, data.refill_golden, tol, alternates)
    if check.passed:
        return None
    stale = outs is not None and all(same_bits(a, b) for a, b in zip(outs, ev.first.outputs))
    if stale:
        return ("after its input buffers were refilled with new values it returned the previous answer "
                "(results cached by pointer or object?)")
    return f"after its input buffers were refilled with new values: {check.note}"
