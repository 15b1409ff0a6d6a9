"""Steps 5 and 6 of the gate (compare.py): whether a candidate that is within tolerance, or passed the fp64-golden
fallback, is still less accurate than the reference (over the case or in a line of the output), or leans off the
exact answer in fp16/bf16. Both measure against the fp64 golden, on fp64 tensors of the output's shape."""

from __future__ import annotations

import torch

from autotune.targets.base import Tolerance

GOLDEN_MULTIPLIER = {torch.float32: 2.0, torch.float16: 3.0, torch.bfloat16: 3.0, torch.float64: 2.0}


def count(mask: torch.Tensor) -> int:
    return int(mask.sum())


BIAS_SHARE = 0.25  # of rtol: the most a half-precision output may lean off the exact answer on average
MIN_BIAS_VALUES = 256  # values the mean needs: rounding's own lean over 256 of them is about 0.05 of a unit


def bias(o: torch.Tensor, r: torch.Tensor, g: torch.Tensor, tol: Tolerance, dtype: torch.dtype,
         finite: torch.Tensor | None = None) -> str:
    """'' unless a float16/bfloat16 output leans off the exact answer (the fp64 golden) on average: the signed error
    in magnitude, sum((out - golden) * sign(golden)) / sum(|golden|) over the values where rtol rules (|golden| >
    atol / rtol), beyond BIAS_SHARE of rtol and twice the reference's own lean. Each value may be off by rtol, about
    four units of bfloat16's rounding; rounding to nearest leans neither way, so over hundreds of values a correct
    kernel's mean is a small fraction of a unit (rounding toward zero: about half a unit). An attacker's RMSNorm that
    scaled its bfloat16 output by 1.01 was within rtol at every value and 1% too large everywhere. float32 is
    not judged so: its rtol is 22 units, and a TF32 product truncates (leans) by design."""
    if dtype not in (torch.float16, torch.bfloat16):
        return ""
    if finite is None:  # where the output, the reference and the golden are all finite (compare has it)
        finite = torch.isfinite(o) & torch.isfinite(r) & torch.isfinite(g)
    keep = finite & (g.abs() > tol.atol / tol.rtol)
    n = count(keep)
    if n < MIN_BIAS_VALUES:
        return _line_bias(o, r, g, keep, tol)
    sign, size = torch.where(keep, g.sign(), 0.0), torch.where(keep, g.abs(), 0.0)
    total, err = float(size.sum()), ((o - g) * sign).nan_to_num_()  # each value's signed error in magnitude
    lean, own = float(err.sum()) / total, float(((r - g) * sign).nan_to_num_().sum()) / total
    bound = max(BIAS_SHARE * tol.rtol, 2 * abs(own))
    if abs(lean) <= bound or not _steady(err, size, lean, tol):
        return _line_bias(o, r, g, keep, tol)
    return (f"systematic bias: the outputs are {abs(lean):.2%} {'larger' if lean > 0 else 'smaller'} in magnitude "
            f"than the exact answer on average over {n} values (rounding leans neither way: at most {bound:.2%} "
            f"here; the reference's own lean {own:+.3%})")


def _steady(err: torch.Tensor, size: torch.Tensor, lean: float, tol: Tolerance) -> bool:
    """Whether a lean holds across the output (`err`, each value's signed error in magnitude; `size`, |golden|
    where judged): the leans of its pieces (up to 64, of MIN_LINE_VALUES values or
    more, in memory order), weighed by their size, have a mean past Student's t for their effective count (LEAN_T)
    in standard errors from zero. A
    value's rounding error is not always its own: fused MoE rounds each token's intermediate once, as vLLM does,
    and every output of the token carries it, so its reference leans up to 0.27 rtol over 436 values (measured); the
    example fused MoE leaned 0.7 rtol over the 4 tokens of an fp16 case (stop 47). Where a row shares one rounding
    so (`Tolerance.rows_share_rounding`), the pieces are the rows of the last dimension, 3 at least: a uniform scale
    leans alike in every row, and those 4 tokens leaned apart. A stop 48 attacker's RMSNorm scaled bf16 outputs by
    1.005 only in steps of fewer than 8 tokens, whose rows were too few to be judged then."""
    if tol.rows_share_rounding:
        width = err.shape[-1] if err.dim() else 1
        err, size = err.reshape(-1, width).sum(1), size.reshape(-1, width).sum(1)
    else:
        pieces = max(1, min(64, err.numel() // MIN_LINE_VALUES))
        err, size = (torch.stack([p.sum() for p in t.reshape(-1).tensor_split(pieces)]) for t in (err, size))
    # the pieces weighed as the lean weighs them, by their size: one piece that holds a dominant value is nearly the
    # whole lean, and its count is that of one piece (a correct rotary kernel's fp16 key one unit in the last place
    # off at one value of 2000 at 2000, the rest near 1, leaned 0.03% "steadily" by the pieces' unweighted spread)
    has = size > 0
    w, leans = size[has], err[has] / size[has]
    n = float(w.sum()) ** 2 / max(float(w.pow(2).sum()), 1e-300) if w.numel() else 0.0
    if n < 3:
        return False
    t = next(t for dof, t in LEAN_T if n - 1 >= dof)
    # the standard error of a weighted mean, with Bessel's correction for the effective count (equal pieces: as before)
    spread = float((w.pow(2) * (leans - lean).pow(2)).sum().sqrt()) / float(w.sum()) * (n / (n - 1)) ** 0.5
    return abs(lean) > t * spread


LINE_LEAN_NOISE = 2.0  # of rtol over the root of a line's count: 4 standard deviations of values each off by rtol / 2
# values a line needs for its lean to be judged: the noise term grows as the count falls (a line of 4 may lean 1.25
# rtol), so a decode step's channels are lines too (a round-14 attacker pushed channel 17 of 8 bf16 tokens 5% from
# zero, capped at 0.5% of the row's largest value: within every per-value bound; caught in 56 of 60 draws at 8
# tokens, 53 at 4, none of 60 correct ones flagged)
LEAN_LINE_VALUES = 4


def _line_bias(o, r, g, keep, tol: Tolerance) -> str:
    """'' unless a line of the output (`_lines`: a row of the last dimension, a slice at one index of a dimension)
    leans off the exact answer by more than the case may (BIAS_SHARE of rtol, twice the reference's own lean in the
    line) plus LINE_LEAN_NOISE rtol / sqrt(n), n its effective count ((sum |g|)^2 / sum g^2: one massive value is
    one value). Each value is measured in units of its row's RMS size, so that rows at a drawn scale or of massive
    activations weigh in a slice what an ordinary row weighs. The case's lean is a mean weighted by magnitude, ruled
    by its largest tokens: a round-12 attacker's SiLU-and-mul and fused add-RMSNorm (residual) made every token of
    ordinary size 1.45% too large where the step held a large one ([2048, 9728] bf16, 1242 of 2048 tokens), at a
    case lean under 0.1%. Correct kernels: rounding to nearest leans neither way, so a line of n values leans
    about rtol / (14 sqrt(n)) in bf16. Not judged where rows share one rounding (`Tolerance.rows_share_rounding`):
    there a row leans with it (up to 0.7 rtol measured, see `_steady`)."""
    if tol.rows_share_rounding or o.dim() < 2:
        return ""
    # in fp32 (a lean is judged to a few percent of rtol; a served case's fp64 passes took 0.55 s)
    size = torch.where(keep, g.float().abs_(), 0.0)
    row_rms = (size.pow(2).sum(-1, keepdim=True) / keep.sum(-1, keepdim=True).clamp(min=1)).sqrt_()
    row_rms = torch.where(row_rms > 0, row_rms, 1.0)
    sign = torch.where(keep, g.float().sign_(), 0.0).div_(row_rms)  # a value's signed error, in its row's RMS units
    err, own = ((o - g).float().mul_(sign)).nan_to_num_(), ((r - g).float().mul_(sign)).nan_to_num_()
    size.div_(row_rms)
    for name, noun, dim in _lines(g.shape):
        total, square = _sums(size, dim), _sums(size.pow(2), dim)
        judged = (_sums(keep, dim) >= LEAN_LINE_VALUES) & (total > 0)
        if not judged.any():
            continue
        total, square = total[judged], square[judged]
        lean, own_lean = _sums(err, dim)[judged] / total, _sums(own, dim)[judged] / total
        bound = (2 * own_lean.abs()).clamp_(min=BIAS_SHARE * tol.rtol) + LINE_LEAN_NOISE * tol.rtol * (
            square.sqrt() / total)  # 1 / sqrt(effective count)
        worst = _leaning(lean, bound, own_lean, judged, name, noun, "rounding leans neither way: at most "
                         "{bound:.2%} there; the reference's own lean {own:+.3%}")
        if worst:
            return worst
    return ""


def _leaning(lean: torch.Tensor, bound: torch.Tensor, own: torch.Tensor, judged: torch.Tensor, lines: str, noun: str,
             why: str) -> str:
    """'' unless a judged line's lean passes its bound; else the systematic bias of the line furthest past it, with
    `why` (what the bound was made of) formatted with that line's `bound` and the reference's lean there, `own`."""
    over = lean.abs() > bound
    if not over.any():
        return ""
    i = int((lean.abs() / bound).argmax())
    return (f"systematic bias in {count(over)} of {lean.numel()} {lines}: {noun} {int(judged.nonzero()[i])} is "
            f"{abs(float(lean[i])):.2%} {'larger' if lean[i] > 0 else 'smaller'} in magnitude than the exact answer "
            f"on average ({why.format(bound=float(bound[i]), own=float(own[i]))})")


SHARED_LEAN_TIMES = 4  # the largest lean of the reference's valid computations in a row, as many times over


def shared_row_bias(o: torch.Tensor, refs: list[torch.Tensor], g: torch.Tensor, tol: Tolerance,
                    dtype: torch.dtype) -> str:
    """Where each output row carries one rounding of an intermediate and the target declares where valid kernels put
    it (`Target.reference_variants`; `refs`: the reference and its other computations), fp16/bf16: '' unless a row
    of the last dimension (MIN_LINE_VALUES values or more) leans off the exact answer beyond BIAS_SHARE of rtol plus
    SHARED_LEAN_TIMES times the largest lean of `refs` there. Each computation is another draw of the row's
    roundings, so their leans measure how far rounding alone moves that row: over 12 draws a fused MoE token's
    placements leaned at most 0.07 rtol in bf16 (0.11 in fp16) at Qwen3-30B-A3B's 768 intermediate values, 0.27
    (0.47) at 64. The case-wide lean (`bias`) needs 3 rows or more for such targets and many standard errors: a
    round-13 attacker's fused MoE leaned 1.1% (0.69 rtol) on every token of a bf16 decode step of 2 or 4, where
    the reference's leaned under 0.09%."""
    if dtype not in (torch.float16, torch.bfloat16) or o.dim() < 1 or not o.numel():
        return ""
    keep = torch.isfinite(o) & torch.isfinite(g) & (g.abs() > tol.atol / tol.rtol)
    for r in refs:
        keep &= torch.isfinite(r)
    sign, size = torch.where(keep, g.sign(), 0.0), _sums(torch.where(keep, g.abs(), 0.0), None)
    judged = (_sums(keep, None) >= MIN_LINE_VALUES) & (size > 0)
    if not judged.any():
        return ""
    total = size[judged]

    def leans(t: torch.Tensor) -> torch.Tensor:
        return _sums(((t - g) * sign).nan_to_num_(), None)[judged] / total

    own = torch.stack([leans(r).abs() for r in refs]).max(0).values
    bound = BIAS_SHARE * tol.rtol + SHARED_LEAN_TIMES * own
    return _leaning(leans(o), bound, own, judged, f"rows of the last dimension ({o.shape[-1]} wide)", "row",
                    "the reference's valid computations (its rounding placements) lean at most {own:.3%} there: "
                    f"allowed {BIAS_SHARE:g} rtol + {SHARED_LEAN_TIMES}x that, " "{bound:.2%}")


# Student's t that leaves the tail a normal leaves past 4 standard deviations (6.3e-5, both sides) for n - 1 degrees
# of freedom, from the largest count down (mpmath's incomplete beta): 3 rows need their mean 126 standard errors out
LEAN_T = ((30, 4.65), (20, 5.04), (15, 5.48), (12, 5.99), (10, 6.57), (9, 7.0), (8, 7.6), (7, 8.47), (6, 9.84),
          (5, 12.28), (4, 17.45), (3, 32.62), (2, 125.64))


SPENT_FLOOR = 0.1  # of each value's tolerance: the fallback's atol / 10 in those units
# A line's floor in fp32, whose rtol is 11 units in the last place: a correct fp32 attention row that sums in another
# order spent 3.6 of them beyond twice the reference's (0.27 of its tolerance where the reference spent 0.07: the
# example, stop 47), and 44 in a decode at scale 0.088 over 12 draws (stop 48): a score's rounding error grows with
# its size (up to about 100 here), and a probability's relative error with it; folding the scale into exp2 before
# subtracting the max makes it the logit's own size. Where atol rules, a line of small values (a softmax row's
# probabilities, 1e-4 each at 8192 keys) would have half of atol to spend: so the floor is at most LINE_FLOOR_ULPS
# units in the last place of the line's RMS size (the old 0.5 from an RMS of 0.02 up). A stop 48 attacker added
# 4.4e-6 (0.7% of a probability) to every fp32 probability of one softmax row in 32, 0.44 of atol: its floor is 0.015.
FP32_LINE_FLOOR = 0.5
LINE_FLOOR_ULPS = 2048
FALLBACK_FLOOR = 1.0  # where the fallback passed, some values beyond tolerance: a line may spend all of it, no more
# ... in fp16/bf16 half of it, over k (not k x k) times the reference's, in a line whose energy is spread over
# MIN_LINE_VALUES values or more ((sum g^2)^2 / sum g^4: a line of a few large values measures its RMS error from
# those few): a round-12 attacker's SiLU-and-mul put noise of +-1.45% on every ordinary token beside a large one
# (some values beyond tolerance, so the fallback ruled): its rows spent 0.9-1.0; Liger's RoPE, in bf16 arithmetic,
# 0.35 where the reference spent 0.07
FALLBACK_HALF_FLOOR = 0.5
MIN_LINES, MIN_LINE_VALUES = 8, 32  # lines of a cut, and values in each, for one to be judged on its own (behind
# the fallback, any number of lines: its case-wide bounds are absolute, ruled by the largest values)


def less_accurate(o, r, g, keep, tol: Tolerance, dtype: torch.dtype, within: bool = True) -> str:
    """'' unless the candidate is less accurate than the reference, over the case or in a line of the output.

    Errors are measured against the fp64 golden in units of the tolerance, and may be at most k times the reference's
    plus a floor (the fallback's bound, step 4, in those units: k = 2 in fp32, 3 in fp16/bf16; atol / 10 is 0.1).
    - Where every value is within tolerance, in units of each value's own, |out - golden| / (atol + rtol |golden|):
      a row of massive activations weighs what any other row weighs (in absolute units its few values decide).
      - Over the case: each value may spend its tolerance, but not all of them the same way. A stop 46 attacker's
        softmax took 0.85e-5 off every probability (under atol 1e-5), 7% of each long row's mass; its RMSNorm
        nudged every bf16 value 0.9% toward +Inf.
      - Line by line, over each row of the last dimension and each slice at one index of any dimension (a token, a
        head, a channel), with 8 lines of 32 values or more. A third attacker put its error where the case dilutes
        it, 8e-6 on every probability of one softmax row in 128 (it sums to 1.066 at 8192 keys) or one bf16 RMSNorm
        token in 32 made 0.8% too large. A line is held to k times the reference's in that line or over the case,
        the larger (a line's own estimate is noisy; a kernel that computes in its storage type on purpose, as
        Liger's RMSNorm and SwiGLU do, spends about a quarter of bf16's tolerance in every line), plus 0.1 (0.5 in
        fp32: FP32_LINE_FLOOR), and no more than LINE_FLOOR_ULPS units in the last place of the line's RMS size.
    - Where step 3 failed and the fallback passed (`within` False), the lines only, each in units of the tolerance
      at its RMS size, atol + rtol RMS(golden) (a value that cancels to near zero in a rotation or an attention sum,
      beyond its own tolerance there, weighs no more than its line), at k x k times the reference's plus 1 (in
      fp16/bf16 k times plus 0.5 in lines of many values: FALLBACK_HALF_FLOOR): a line may not be off by more than
      its whole tolerance or k times what the fallback allows the case. The fallback's RMSE is absolute, ruled by
      the case's largest values: a fourth attacker's SiLU-and-mul zeroed every output
      below 2^-10 of the tensor's RMS, wiping small tokens whole (43 of 64 rows of a [64, 6144] bf16 step off by
      more than half), at 1.2 times the reference's RMSE; each such row is off by about 60 tolerances. Here a cut
      of fewer than 8 lines is judged too: a round-9 attacker's SiLU-and-mul zeroed the ordinary tokens of a decode
      step of 4 beside one of massive activations, which set the fallback's every bound.
    `keep`: the values judged, where the reference, the golden and the output are all finite."""
    if not keep.any():
        return ""
    k = GOLDEN_MULTIPLIER.get(dtype, 2.0)
    n = count(keep)
    cand, own = torch.where(keep, o - g, 0.0).pow_(2), torch.where(keep, r - g, 0.0).pow_(2)
    size = torch.where(keep, g, 0.0).pow_(2)  # for the lines' RMS sizes
    if within:
        spent = torch.where(keep, tol.atol + tol.rtol * g.abs(), 1.0).pow_(2)  # no NaN from values not kept
        cand, own = cand / spent, own / spent
        c, case_ref = (float(cand.sum()) / n) ** 0.5, (float(own.sum()) / n) ** 0.5
        if c > k * case_ref + SPENT_FLOOR:
            return (f"less accurate than the reference though within tolerance at every value: its values spend "
                    f"{c:.2f} of their tolerance against the fp64 answer (root mean square) where the reference's "
                    f"spend {case_ref:.2f} (allowed {k:g}x + {SPENT_FLOOR:g})")
        times, floor, units = k, FP32_LINE_FLOOR if dtype == torch.float32 else SPENT_FLOOR, "each value's tolerance"
        though = "within tolerance at every value"
    else:
        case_ref = (float(own.sum()) / n) ** 0.5 / (tol.atol + tol.rtol * (float(size.sum()) / n) ** 0.5)
        times, floor, units = k * k, FALLBACK_FLOOR, "the tolerance at the line's RMS size"
        though = "the fp64-golden fallback passed"
    for name, noun, dim in _lines(o.shape):
        counts = _sums(keep, dim)
        judged = counts >= MIN_LINE_VALUES
        if count(judged) < (MIN_LINES if within else 1):
            continue
        per = counts[judged]
        c_line = (_sums(cand, dim)[judged] / per).sqrt()
        ref_line = (_sums(own, dim)[judged] / per).sqrt()
        rms = (_sums(size, dim)[judged] / per).sqrt()
        at_rms = tol.atol + tol.rtol * rms  # the tolerance at the line's RMS size
        line_times = torch.full_like(rms, times)
        if within:  # the floor: at most LINE_FLOOR_ULPS of the line's RMS size
            line_floor = (LINE_FLOOR_ULPS * torch.finfo(dtype).eps * rms / at_rms).clamp_(max=floor)
        else:
            c_line, ref_line, line_floor = c_line / at_rms, ref_line / at_rms, torch.full_like(rms, floor)
            if dtype != torch.float32:  # a line of many values' energy, in half precision: FALLBACK_HALF_FLOOR
                many = _sums(size, dim)[judged].pow(2) >= MIN_LINE_VALUES * _sums(size.pow(2), dim)[judged]
                line_times[many], line_floor[many] = k, FALLBACK_HALF_FLOOR
        bound = line_times * ref_line.clamp(min=case_ref) + line_floor
        over = c_line > bound
        if over.any():
            i = int((c_line / bound).argmax())
            return (f"less accurate than the reference in {count(over)} of {c_line.numel()} {name}, though {though}: "
                    f"{noun} {int(judged.nonzero()[i])} is off the fp64 answer by {float(c_line[i]):.3g} of "
                    f"{units} (root mean square) where the reference is off by {float(ref_line[i]):.2g} there and "
                    f"{case_ref:.2g} over the case (allowed {float(line_times[i]):g}x the larger + "
                    f"{float(line_floor[i]):.2g})")
    return ""


def mostly_beyond(o, r, g, keep, tol: Tolerance, dtype: torch.dtype) -> str:
    """Behind the fp64-golden fallback: '' unless most values of the case, or of a line (`_lines`, MIN_LINE_VALUES
    or more), are beyond their own tolerance, |out - golden| > atol + rtol |golden|, where most of the reference's are
    within 1/k of theirs (where most are within it but not within 1/k: unless most of the candidate's are beyond k
    times it). The fallback excuses the values the reference cannot get right either (a sum that cancels to near
    zero), not most of a line (through TF32 most of the reference's are far off too: this says nothing there). Its
    bounds are absolute and set by the case's largest values, and so are a line's RMS units: a round-10 attacker's
    SiLU-and-mul, beside one massive activation (3000 x 11.3) in a decode token of [1, 28672] bf16, moved every
    ordinary output by 42% (26 tolerances at the median), at 1.8 times the reference's RMSE. Correct kernels
    measured: at most 0.3 tolerances at the median in fp16/bf16. Counted, not sorted: medians of a served case
    took 1.3 s."""
    if not keep.any():
        return ""
    k = GOLDEN_MULTIPLIER.get(dtype, 2.0)
    unit = tol.atol + tol.rtol * g.abs()
    cand, own = (o - g).abs_().div_(unit), (r - g).abs_().div_(unit)
    masks = [keep, keep & (cand > 1), keep & (own > 1), keep & (own > 1 / k), keep & (cand > k)]
    for name, noun, dim in [("values of the case", "the case", -1), *_lines(o.shape)]:
        n, beyond, own_beyond, own_off, far = (m.sum().reshape(1) if dim == -1 else _sums(m, dim) for m in masks)
        judged, half = n >= (1 if dim == -1 else MIN_LINE_VALUES), n / 2
        # the reference's median within 1/k of the tolerance, or only within it
        over = judged & (own_beyond <= half) & ((far > half) | ((own_off <= half) & (beyond > half)))
        if over.any():
            i = int(over.nonzero()[0])
            return (f"most of its values beyond their own tolerance, though the fp64-golden fallback passed: in "
                    f"{noun if dim == -1 else f'{noun} {i}'} {int(beyond[i])} of {int(n[i])} values are off the fp64 "
                    f"answer by more than their tolerance where {int(own_beyond[i])} of the reference's are "
                    f"({int(over.sum())} of {int(judged.sum())} {name} so): the fallback excuses the values a "
                    "rounding cannot get right, not most of them")
    return ""


ORDINARY_SPAN = 64  # a value more than this many times its row's mean magnitude is an outlier (ordinary)


def ordinary(g: torch.Tensor, keep: torch.Tensor) -> torch.Tensor | None:
    """The kept values of ordinary size: within ORDINARY_SPAN times the mean magnitude of their row of the last
    dimension (a row of mean 0: all of it); None where that is every kept value, or none. Behind the fallback the
    case is judged again on these alone (compare): its absolute bounds are set by the largest values, and a massive
    activation's rounding (64 at 16384 in bf16) let a round-11 attacker move 40% of its token's other values by up
    to 100% (spread thin enough for the RMSE, fewer than half a line for `mostly_beyond`). The mean, not the median
    (sorting a served case's rows took 0.2 s): one value of 1056 among 14336 of 0.15 moves it to 0.22."""
    size = torch.where(keep, g.abs(), 0.0)
    width = size.shape[-1] if size.dim() else 1
    rows, kept_rows = size.reshape(-1, width), keep.reshape(-1, width).sum(1)
    mean = rows.sum(1) / kept_rows.clamp(min=1)
    limit = torch.where(mean > 0, ORDINARY_SPAN * mean, float("inf"))
    plain = (rows <= limit[:, None]).reshape(g.shape) & keep
    kept = count(keep)
    return plain if 0 < count(plain) < kept else None


def _lines(shape: torch.Size) -> list[tuple[str, str, int | None]]:
    """The ways step 5 cuts an output into lines (`_sums`): the rows of its last dimension (None: a token's hidden
    vector, a head's), and the slices at each index of each dimension (a token, a head, a channel, an expert's)."""
    if len(shape) < 2:
        return []
    cuts: list[tuple[str, str, int | None]] = [(f"rows of the last dimension ({shape[-1]} wide)", "row", None)]
    for d in range(1 if len(shape) == 2 else 0, len(shape)):  # in 2-D the slices of dimension 0 are the rows
        cuts.append((f"slices at one index of dimension {d} (of {shape[d]})", "index", d))
    return cuts


def _sums(t: torch.Tensor, dim: int | None) -> torch.Tensor:
    """t summed over each line, with no copy of t: each row of its last dimension (None), or each slice at one index
    of `dim`."""
    return t.sum(-1).reshape(-1) if dim is None else t.sum([d for d in range(t.dim()) if d != dim])
