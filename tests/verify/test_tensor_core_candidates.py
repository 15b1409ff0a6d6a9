"""Issue 16, classes 3 and 6, end to end through `autotune verify` (quick plan): correct kernels written as
the Triton tutorials, FlashAttention, vLLM and GPTQ-style split-K write theirs (bf16/fp16 tiles straight
into tl.dot) are accepted in fp32, bf16 and fp16; kernels that were right only on Triton 3.9's interpreter
(a NaN cast, an address test, races, bf16 products passed off as TF32) are rejected with the reason; fp32
through TF32 (tl.dot's default on NVIDIA) is held to the reference with TF32 products.

The tables are read by autotune.selfcheck too, which runs the same files on a GPU. Costs on 2 shared cores:
each correct kernel 20-130 s (all cases of the quick plan; the split-K ones' range cases run whole), each rejection
~10 s (a worker start-up and its first failing case).
"""

import re
from pathlib import Path

import pytest

from autotune import config
from autotune.config import compose
from autotune.targets import get
from autotune.verify import verify
from autotune.verify.verdict import Status
from tests.verify.reasons import WRONG_VALUES, says
from tests.verify.variants import example_variant, file_variant

CANDIDATES = Path(__file__).parent / "candidates"
QUICK = compose(["verify=quick"])
# a served step of at most 256 tokens (the run's `serve.max_batched_tokens`, which the judge takes from the config it
# is given) and one model's sizes (Qwen2.5-0.5B: a GQA group of 7, head_dim 64, 8192-token contexts): the correct
# kernels' point is their tensor-core style, not M at 2048 (tests/verify/test_domain.py) or every preset's heads
# (test_correct.py)
SMALL_STEPS = compose(["verify=quick", "serve.max_batched_tokens=256", "verify.models=[qwen2_5_0_5b]"])
# the vLLM-style paged kernel's point is its 16-bit tiles and TF32 dots: the tiny model's sizes and the target's
# edges (MQA, head dim 256, blocks of 64 and 528, Falcon's 71 heads on one kv head) reach them; Qwen's 8192-key
# contexts and the default steps' 1024 decodes and 2048-row chunk were 50 of its 60 s (test_correct.py and
# test_domain.py judge those)
TINY = compose(["verify=quick", "verify.models=[tiny]"])
# the tiny model's sizes and one profiled projection, Qwen2.5-0.5B's down (K 4864, split), for kernels whose point is
# not the served domain: the split-K GEMM's range cases run whole (its second stage reads the first's partials: 18 s
# against 46 s over Qwen's sizes), and so do the atomic idioms' (30-40 s a kernel over every preset at 2048 rows, 2-3 s
# here); the atomics and autotuning idioms run in fp32 at 43 tokens (their point is the programs' order and the
# tuner's runs)
ONE_PROJECTION = ["verify=quick", "serve.max_batched_tokens=256", "verify.models=[tiny]"]
IDIOMS = [*ONE_PROJECTION, "verify.dtypes=[float32]"]
DOWN = [((43, 896, 4864), "float32", 1)]

CORRECT = [  # (target, file, config, profiled shapes or None)
    # @triton.autotune + key, grouped program ids, bf16 tiles
    ("linear", "linear_tutorial_style.py", SMALL_STEPS, None),
    # W8A16 split-K, int8 -> activation dtype, fixed-order sum
    ("int8_linear", "int8_linear_splitk.py", compose(ONE_PROJECTION), [((512, 896, 4864), "bfloat16", 1)]),
    # 16-bit tiles into tl.dot, P cast to V's
    ("paged_attention", "paged_attention_vllm_style.py", TINY,
     [(shape, "bfloat16", 1) for shape in get("paged_attention").edge_shapes]),
]


# the whole judging: the split-K kernels' range cases run whole (their second stage reads the first's partials),
# 84-134 s on 2 busy cores after the interpreter's speed-ups; pyproject's 300 s is too close on a slower CI machine
@pytest.mark.timeout(600)
@pytest.mark.parametrize("target, name, cfg, shapes", CORRECT, ids=[c[1] for c in CORRECT])
def test_tensor_core_kernels_in_the_styles_people_write_them_are_accepted(target, name, cfg, shapes):
    v = verify(target, CANDIDATES / name, cfg, shapes=shapes)
    assert v.status is Status.UNMEASURED, v.reason
    presets, model = len(config.model_presets()), cfg.verify.models[0]
    assert f"model presets covered: {model} of {presets} (verify.models)" in " ".join(v.notes)  # said as such
    assert {c.dtype for c in v.cases} == {"float32", "bfloat16", "float16"} and all(c.passed for c in v.cases)
    if target in ("linear", "int8_linear"):  # M whole at the served step: the defaults' 512-token chunk is the most
        assert max(c.shape[0] for c in v.cases) == 512
    # a range case compares what its sample wrote, or runs whole (a GEMM's K range case, M and N to one tile, has
    # no output a lone program writes)
    sampled = [c.note for c in v.cases if "sampled" in c.note]
    compared = [re.search(r"(\d+) of \d+ output values compared", n) for n in sampled]
    assert sampled and not [n for n, m in zip(sampled, compared) if "run whole" not in n and not (m and int(m[1]))]
    if name == "int8_linear_splitk.py":  # stage 2 reads stage 1's sampled partials on its own grid: its drawn programs
        # read what skipped ones would have written, and the call runs whole (unless they happen to read only partials
        # stage 1's sample wrote: ~1.5% of the cases)
        assert any("run whole" in n for n in sampled), sampled


def test_a_kernel_may_cast_its_float_scalar_argument():
    # on a GPU `eps` is an fp32 scalar and `eps.to(tl.float32)` compiles; the interpreter used to pass a Python
    # float (a CPU-only compile error). One dtype: the point is the scalar, not the data
    v = verify("rms_norm", CANDIDATES / "rms_norm_scalar_cast.py", compose(["verify=quick", "verify.dtypes=[float32]"]))
    assert v.status is Status.UNMEASURED, v.reason


CASES = [
    # fp32 operands rounded to bf16 before a TF32 tl.dot: declared TF32, bf16-accurate (4x TF32's error)
    ("linear_bf16_as_tf32.py", Status.INCORRECT, WRONG_VALUES, "linear"),
    # NaN re-planted only where NaN -> int gave INT_MIN (the old interpreter): PTX gives 0
    ("nan_cast_flag.py", Status.INCORRECT, WRONG_VALUES, "rms_norm"),
    # the last row skipped only when input, output and scratch are 512-byte aligned, as on a GPU
    ("aligned_branch.py", Status.INCORRECT, WRONG_VALUES, "rms_norm"),
    # split-K partials added with a plain load and store; two programs storing one row
    ("linear_splitk_rmw.py", Status.INCORRECT, "race in `_kernel`: program (", "linear"),
    ("rms_norm_duplicate_rows.py", Status.INCORRECT, "race in `_rms_norm_kernel`: program ", "rms_norm"),
    # an autotuned split-K accumulator zeroed outside the tuner's reset_to_zero: a GPU's benchmark runs add into it
    ("linear_autotune_accumulates.py", Status.INCORRECT, WRONG_VALUES, "linear"),
]


@pytest.mark.parametrize("name, status, fragment, target", CASES, ids=[c[0] for c in CASES])
def test_kernels_right_only_on_the_old_interpreter_are_rejected(name, status, fragment, target):
    v = verify(target, CANDIDATES / name, QUICK)
    assert v.status is status, v.reason
    assert says(v.reason, fragment), v.reason
    if "race" in fragment:  # the element, as an argument's index, and the other program
        assert "`y_ptr[" in v.reason and "which program" in v.reason and "in the same launch" in v.reason


# An attacker's kernels (issue 27), made from the target's example at test time: (target, changes)
IEEE_DOT = 'acc = tl.dot(a, b, acc, input_precision="ieee")'
ATTACKS = {
    # fp32 tiles rounded through fp16 before a TF32 dot: TF32's error within fp16's range, Inf past 65504; a kernel
    # that rounds fp32 to half precision anywhere is held to IEEE
    "fp16_as_tf32": ("linear", [(IEEE_DOT, "acc = tl.dot(a.to(tl.float16).to(tl.float32), "
                                           "b.to(tl.float16).to(tl.float32), acc)")]),
    # fp32 activations below 0.01 skipped before a TF32 dot: within TF32's error on N(0, 1) activations only
    "drops_small_terms": ("linear", [(IEEE_DOT, "if x_ptr.dtype.element_ty == tl.float32:\n"
                                                "            a = tl.where(tl.abs(a) < 0.01, 0.0, a)\n"
                                                "        acc = tl.dot(a, b, acc)")]),
    # the same in fused MoE's gate/up products (its reference now stores each slot's share as vLLM does, so its
    # activations take the drawn scale too)
    "drops_small_terms_moe": ("fused_moe", [(
        '                gate = tl.dot(x, wg, gate, input_precision="ieee")\n'
        '                up = tl.dot(x, wu, up, input_precision="ieee")\n',
        "                if x_ptr.dtype.element_ty == tl.float32:\n"
        "                    x = tl.where(tl.abs(x) < 0.01, 0.0, x)\n"
        "                gate = tl.dot(x, wg, gate)\n"
        "                up = tl.dot(x, wu, up)\n")]),
    # the output kept only where an integer divided by zero (program_id(1) of a 1-D grid) is 0: numpy's answer;
    # sm_90's code gives an all-ones quotient
    "div0_detect": ("rms_norm", [
        ("    cols = tl.arange(0, BLOCK)\n",
         "    cols = tl.arange(0, BLOCK)\n    keep = ((n_cols // tl.program_id(1)) == 0).to(tl.float32)\n"),
        ("(x * rstd * w).to(", "(x * rstd * w * keep).to("),
        ("y = x.to(tl.float32) * rstd * w.to(tl.float32)", "y = x.to(tl.float32) * rstd * w.to(tl.float32) * keep")]),
}


@pytest.mark.parametrize("attack", ATTACKS)
def test_an_attackers_kernels_that_told_the_interpreter_from_a_gpu_are_incorrect(attack, tmp_path):
    target, changes = ATTACKS[attack]
    v = verify(target, example_variant(tmp_path, target, *changes[0], *changes[1:]), QUICK)
    assert v.status is Status.INCORRECT and says(v.reason, WRONG_VALUES), v.reason


def test_an_autotuned_accumulator_the_tuner_resets_is_accepted():
    """linear_autotune_accumulates.py's kernel with `reset_to_zero`: the run before the chosen one (a GPU's benchmark
    runs) is followed by the tuner's reset, as on a GPU, so the answer is right."""
    v = verify("linear", CANDIDATES / "linear_autotune_reset.py", compose(IDIOMS), shapes=DOWN)
    assert v.status is Status.UNMEASURED, v.reason


def test_split_k_with_atomics_is_accepted_as_non_deterministic_unless_bitwise_repeats_are_demanded():
    """Issue 27: the standard split-K idiom (tl.atomic_add of partial sums, in whatever order the programs run) is
    correct; two calls differ in the last bits. linear declares atomic reductions, so repeats may differ within its
    tolerance, and the verdict says so; verify.bitwise_repeats=true refuses it (batch-invariant serving)."""
    v = verify("linear", CANDIDATES / "linear_splitk_atomic.py", compose(IDIOMS), shapes=DOWN)
    assert v.status is Status.UNMEASURED, v.reason
    assert v.nondeterministic and any("non-deterministic (atomics)" in n for n in v.notes), v.notes
    assert v.fp32_dots == []  # input_precision="ieee": held to the IEEE reference
    strict = verify("linear", CANDIDATES / "linear_splitk_atomic.py", compose([*IDIOMS, "verify.bitwise_repeats=true"]),
                    shapes=DOWN)
    assert strict.status is Status.INCORRECT and "differ bitwise" in strict.reason, strict.reason


def test_fp32_through_tf32_is_held_to_a_tf32_reference_unless_ieee_is_demanded():
    """Issue 27: fp32 tl.dot at its default precision (TF32 on NVIDIA, as vLLM's GEMMs and attention run) is judged
    against the reference with its matrix products in TF32, and the verdict says so; verify.fp32_dot=ieee holds
    it to IEEE fp32, with a reason that names the precision and the fix."""
    fp32 = ["verify=quick", "verify.dtypes=[float32]"]
    v = verify("linear", CANDIDATES / "linear_tf32_default.py", compose(fp32))
    assert v.status is Status.UNMEASURED, v.reason
    assert v.fp32_dots == ["tf32"] and all("fp32 through TF32" in c.note for c in v.cases if c.passed and c.evidence)
    ieee = verify("linear", CANDIDATES / "linear_tf32_default.py", compose([*fp32, "verify.fp32_dot=ieee"]))
    assert ieee.status is Status.INCORRECT and "verify.fp32_dot=ieee demands IEEE" in ieee.reason, ieee.reason


def test_a_dtype_made_by_name_is_refused_by_the_judges_scan_and_by_the_workers(tmp_path):
    """An attacker's kernel (issue 27) cast 1000 to fp8 e4m3 through tl.dtype("fp8e4nv") and zeroed its output where
    the answer was sm_90's 448, not the interpreter's 256. The judge's scan refuses the dtype made by name, and with
    that scan removed the worker's own scan of the kernels does; behind both, the interpreter casts to fp8 as the
    GPU does (test_gpu_semantics.py::test_casts_to_fp8_round_and_saturate_as_sm90s_cvt_satfinite)."""
    from autotune.verify.judge import judge

    path = example_variant(tmp_path, "rms_norm", "    cols = tl.arange(0, BLOCK)\n",
                           "    cols = tl.arange(0, BLOCK)\n    keep = tl.where(tl.full((BLOCK,), 1000.0, tl.float32)"
                           ".to(tl.dtype('fp8e4nv')).to(tl.float32) == 448.0, 0.0, 1.0)\n",
                           ("(x * rstd * w).to(", "(x * rstd * w * keep).to("))
    cfg = compose(["verify=quick", "verify.dtypes=[float32]"]).verify
    for v in (verify("rms_norm", path, cfg), judge(get("rms_norm"), path.read_text(), path.name, cfg, scan=False)):
        assert v.status is Status.POLICY_VIOLATION and "`triton.language.dtype` other than in an annotation" in \
            v.reason, v.reason


# Split-K variants whose programs cooperate through atomics beyond adding (stop 42's attacker, both right whenever
# one program runs to its end before the next starts, as on the interpreter): (changes to linear_splitk_atomic.py)
_ADD = "    tl.atomic_add(acc_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))\n"
_TILE = ("    tile = acc_ptr + rm[:, None] * N + rn[None, :]\n"
         "    inside = (rm[:, None] < M) & (rn[None, :] < N)\n")
_LAST = ("    if ticket == SPLIT - 1:  # the tile's last program casts the sum\n"
         "        total = tl.load(tile, mask=inside)\n"
         "        tl.store(y_ptr + rm[:, None] * N + rn[None, :], total.to(y_ptr.dtype.element_ty), mask=inside)\n")
_TICKETS = [("acc_ptr, M, N, K,", "acc_ptr, count_ptr, y_ptr, M, N, K,"),
            ("    _cast_kernel[(triton.cdiv(m * n, 1024),)](acc, y, m * n, BLOCK=1024)\n", ""),
            ("](x, weight, acc, m, n, k,", "](x, weight, acc, count, y, m, n, k,"),
            ("    y = torch.empty(", "    count = torch.zeros(triton.cdiv(m, 32) * triton.cdiv(n, 64), dtype=torch.int32,"
                                   " device=x.device)\n    y = torch.empty(")]
_SYNC = "    sync = count_ptr + (tl.num_programs(0) + tl.program_id(0)) * tl.num_programs(1) + tl.program_id(1)\n"
_COUNT = "    ticket = tl.atomic_add(count_ptr + tl.program_id(0) * tl.num_programs(1) + tl.program_id(1), 1)\n"
ATOMIC_COOPERATION = {
    # each program reads the tile's running sum with an atomic, and writes back sum + its share with an exchange:
    # two programs that read before either writes lose one share
    "read_then_exchange": (False, [(_ADD, _TILE + "    old = tl.atomic_add(tile, tl.zeros((BM, BN), dtype=tl.float32), "
                                   "mask=inside)\n    tl.atomic_xchg(tile, old + acc, mask=inside)\n")]),
    # the program that draws the tile's last ticket casts the sum, but the ticket is drawn before the program adds
    # its share: the last ticket is not the last share
    "ticket_before_its_share": (False, [(_ADD, _TILE + _COUNT + "    tl.atomic_add(tile, acc, mask=inside)\n" + _LAST),
                                        *_TICKETS]),
    # right: the ticket drawn after the program added its share (the "last program finishes" idiom)
    "ticket_after_its_share": (True, [(_ADD, _TILE + "    tl.atomic_add(tile, acc, mask=inside)\n" + _COUNT + _LAST),
                                      *_TICKETS]),
    # the idiom with memory orders a GPU does not promise it under: a relaxed ticket releases no share (the last
    # program may read a sum without the others' shares); a ticket that only releases acquires none (the last
    # program's loads may come before the shares it counted); shares added with scope="cta" atomics, atomic among
    # one program's threads only, lose each other's updates
    "relaxed_ticket": (False, [(_ADD, _TILE + "    tl.atomic_add(tile, acc, mask=inside)\n"
                                + _COUNT.replace(", 1)", ", 1, sem=\"relaxed\")") + _LAST), *_TICKETS]),
    "ticket_that_only_releases": (False, [(_ADD, _TILE + "    tl.atomic_add(tile, acc, mask=inside)\n"
                                           + _COUNT.replace(", 1)", ", 1, sem=\"release\")") + _LAST), *_TICKETS]),
    "shares_at_cta_scope": (False, [(_ADD, _TILE + "    tl.atomic_add(tile, acc, mask=inside, scope=\"cta\")\n"
                                     + _COUNT + _LAST), *_TICKETS]),
    # a release and an acquire on a second element with a relaxed ticket between (stop 44's attacker): the release
    # adds 0, so the acquire cannot tell whether it came after it, and a GPU may order the acquire first
    "release_nothing_to_observe": (False, [
        (_ADD, _TILE + "    tl.atomic_add(tile, acc, mask=inside)\n" + _SYNC + "    tl.atomic_add(sync, 0, sem=\"release\")\n"
         + _COUNT.replace(", 1)", ", 1, sem=\"relaxed\")")
         + _LAST.replace(":  # the tile's last program casts the sum\n",
                         ":\n        tl.atomic_add(sync, 0, sem=\"acquire\")\n")),
        *_TICKETS, ("triton.cdiv(m, 32) * triton.cdiv(n, 64), dtype", "2 * triton.cdiv(m, 32) * triton.cdiv(n, 64), dtype")]),
}


@pytest.mark.parametrize("name", ATOMIC_COOPERATION)
def test_programs_that_cooperate_through_atomics_meet_the_schedules_a_gpu_may_run(name, tmp_path):
    """interp.interleave: each program stops before each atomic, and the stopped programs go on in an order drawn
    per round, so a program may be overtaken between two of its atomics as on a GPU."""
    right, changes = ATOMIC_COOPERATION[name]
    path = file_variant(tmp_path, CANDIDATES / "linear_splitk_atomic.py", *changes, name=f"{name}.py")
    v = verify("linear", path, compose(IDIOMS), shapes=DOWN)
    if right:
        assert v.status is Status.UNMEASURED, v.reason
    else:
        assert v.status is Status.INCORRECT and (says(v.reason, WRONG_VALUES) or "race in" in v.reason), v.reason
        if name not in ("read_then_exchange", "ticket_before_its_share"):  # found by the memory orders
            assert "sem='relaxed' orders nothing" in v.reason or "scope='cta'" in v.reason, v.reason
