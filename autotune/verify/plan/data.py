"""A case's data: its inputs, drawn from generators keyed by the run's secret salt, and the judge's own answers
(the reference and the fp64 golden). Made in the judging process; the candidate's process never gets the salt."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
from collections.abc import Callable

import torch
import torch.utils._python_dispatch

from autotune.targets.base import Shape, Target, dtype_name
from autotune.verify.plan.cases import Case

PAD_ELEMENTS = 16  # "padded" rows: stride(-2) = width + 16 (32 bytes in fp16/bf16, 64 in fp32: aligned)


@dataclasses.dataclass
class CaseData:
    """The case's inputs and the judge's own answers for them (never sent to the candidate's process)."""

    args: tuple
    reference: tuple[torch.Tensor, ...]
    golden: tuple[torch.Tensor, ...]  # the reference on fp64 inputs, in fp64
    # per argument: the value the reference left in it when the target declares it `mutates`, else None
    written: tuple = ()
    written_golden: tuple = ()
    refill_args: tuple | None = None
    refill_reference: tuple[torch.Tensor, ...] | None = None
    refill_golden: tuple[torch.Tensor, ...] | None = None
    refill_written: tuple = ()
    refill_written_golden: tuple = ()
    # a sampled range case of a target with a rows_problem: reference and golden wait for the rows its programs
    # wrote (answer_rows), made after its run
    rows_pending: bool = False
    # the reference's other valid computations (other_references: the other order of its fp32 products, the
    # target's other placements of its roundings), made on demand from the same call the reference was made from
    # (a sampled case's: the rows its programs wrote); None: none
    alternate: Callable[[], list[tuple]] | None = None


def generator(target: Target, shape: Shape, dtype: torch.dtype, kind: str, seed: int, salt: bytes) -> torch.Generator:
    """A generator for one case's inputs, keyed by the run's secret salt: the same case of the same run always
    gets the same inputs, and nobody without the salt (the candidate's process never gets it) can make them."""
    text = f"{target.name}|{list(shape)}|{dtype_name(dtype)}|{kind}|{seed}".encode()
    digest = hashlib.blake2b(text, key=salt, digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little"))


def as_tuple(out) -> tuple[torch.Tensor, ...]:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


@dataclasses.dataclass(frozen=True)
class Answers:
    reference: tuple[torch.Tensor, ...]
    golden: tuple[torch.Tensor, ...]  # the reference on fp64 inputs, in fp64
    written: tuple  # per argument: what the reference wrote into it (declared `mutates`), else None
    written_golden: tuple


def expected(target: Target, args: tuple) -> Answers:
    """The reference's outputs and in-place writes for these inputs, and the same in fp64. The reference
    runs on copies: the inputs the candidate gets stay as they were made."""
    names = target.arg_names

    def run(inputs: tuple) -> tuple[tuple, tuple]:
        out = as_tuple(target.reference(*inputs))
        return out, tuple(a if names[i] in target.mutates else None for i, a in enumerate(inputs))

    own = _own_copies(target, args)
    wide = tuple(a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)
    with _aten_gemms():
        (reference, written), (golden, written_golden) = run(own), run(wide)
    return Answers(reference, golden, written, written_golden)


def _own_copies(target: Target, args: tuple) -> tuple:
    """The arguments with a copy of each the target writes in place (`mutates`): the reference runs on these, and
    the inputs the candidate gets stay as they were made."""
    return tuple(a.clone() if isinstance(a, torch.Tensor) and target.arg_names[i] in target.mutates else a
                 for i, a in enumerate(args))


def _aten_gemms():
    """The reference's GEMMs on the CPU by ATen's own code, not oneDNN's: oneDNN's bf16 GEMM (torch 2.13 on an
    AVX-512 CPU, K not a multiple of its block) puts NaN in every output of the row before one whose input holds
    an Inf or NaN, where a GPU's GEMM and ATen's keep them to their own row. About 50 ms for a 2048 x 583 x 583
    range case, a few ms for the others; CUDA tensors do not use these flags."""
    return torch.backends.mkldnn.flags(enabled=False, deterministic=False, allow_tf32=None, fp32_precision=None)


_TF32_LOW_BITS = 0x1FFF  # the 13 mantissa bits an fp32 has and a TF32 lacks
# The matrix products of aten (what torch.matmul, F.linear and einsum come to): the positions of their factors
_PRODUCTS = {"mm": (0, 1), "bmm": (0, 1), "addmm": (1, 2), "baddbmm": (1, 2), "mv": (0, 1), "addmv": (1, 2),
             "dot": (0, 1), "addbmm": (1, 2)}


def tf32(x: torch.Tensor) -> torch.Tensor:
    """fp32 values as a TF32 tensor core reads them (Triton's tl.dot: the low mantissa bits dropped); NaN stays."""
    truncated = (x.contiguous().view(torch.int32) & ~_TF32_LOW_BITS).view(torch.float32).view(x.shape)
    return torch.where(torch.isnan(x), x, truncated)


class _TF32Products(torch.utils._python_dispatch.TorchDispatchMode):
    """Every fp32 matrix product of the reference with its factors read as TF32: the reference as
    `torch.backends.cuda.matmul.allow_tf32` computes it, but truncating as Triton's tl.dot does."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        factors = _PRODUCTS.get(func.overloadpacket.__name__, ())
        args = tuple(tf32(a) if i in factors and isinstance(a, torch.Tensor) and a.dtype == torch.float32 else a
                     for i, a in enumerate(args))
        return func(*args, **(kwargs or {}))


def tf32_reference(target: Target, args: tuple) -> tuple[torch.Tensor, ...]:
    """The reference's outputs on these (fp32) inputs with its matrix products through TF32: the accuracy a kernel
    whose fp32 tl.dot runs at TF32 (its default on NVIDIA) is held to."""
    with _aten_gemms(), _TF32Products():
        return as_tuple(target.reference(*_own_copies(target, args)))


def exact_reference(target: Target, args: tuple, tf32: bool = False) -> tuple[torch.Tensor, ...]:
    """The reference's outputs with each fp32 matrix product summed exactly and rounded once, as an MMA sums (at
    TF32 where `tf32`): the other order an fp32 product is validly computed in (ATen's CPU GEMM sums in blocks).
    Where an output is ill-conditioned in its products' rounding, which of the two the reference happened to use
    decides its error (judge.compare: the larger is the reference's)."""
    with _aten_gemms(), _ExactProducts(), (_TF32Products() if tf32 else contextlib.nullcontext()):
        return as_tuple(target.reference(*_own_copies(target, args)))


def other_references(target: Target, args: tuple, tf32: bool = False) -> list[tuple[torch.Tensor, ...]]:
    """The reference's outputs computed in the other valid ways: its fp32 products summed exactly (exact_reference)
    and each of the target's other placements of its roundings (`Target.reference_variants`, at TF32 where `tf32`).
    Where an output row carries one rounding of an intermediate, the reference's error is one draw of it: on a fused
    MoE decode token of 40 intermediate values, the reference rounding its SiLU apart was 4 times more accurate than
    the same sum rounded once (a correct kernel), and the judge takes the worst of them at each value (compare)."""
    made = [exact_reference(target, args, tf32)]
    for variant in target.reference_variants:
        with _aten_gemms(), (_TF32Products() if tf32 else contextlib.nullcontext()):
            made.append(as_tuple(variant(*_own_copies(target, args))))
    return made


class _ExactProducts(torch.utils._python_dispatch.TorchDispatchMode):
    """Every fp32 matrix product of the reference computed in fp64 and rounded once to fp32."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in _PRODUCTS and not (kwargs or {}).get("out") and any(
                isinstance(a, torch.Tensor) and a.dtype == torch.float32 for a in args):
            wide = tuple(a.double() if isinstance(a, torch.Tensor) and a.dtype == torch.float32 else a for a in args)
            return func(*wide, **(kwargs or {})).float()
        return func(*args, **(kwargs or {}))


def answers(target: Target, args: tuple) -> tuple[tuple, tuple]:
    """(reference outputs, fp64 golden outputs) for these inputs."""
    a = expected(target, args)
    return a.reference, a.golden


def with_scalars(target: Target, args: tuple, scalars) -> tuple:
    """make_inputs' arguments with the case's scalar values put in by name (an int where make_inputs gives one)."""
    values, names = list(args), target.arg_names
    for name, value in scalars:
        i = names.index(name)
        values[i] = int(value) if isinstance(values[i], int) else value
    return tuple(values)


def lay_out(args: tuple, layout: str) -> tuple:
    """The arguments in the case's memory layout (targets.base.LAYOUTS). Gaps are NaN: a kernel that reads a
    padding element or the qkv row's other heads gets NaN in its output. "offset0" and "contiguous"
    differ only in where the worker puts them (Case.front_guard)."""
    x = args[0]
    if layout == "kv_cache_vllm":  # args 1 and 2: the caches, k and v halves of one head-major tensor
        k, v = args[1], args[2]
        blocks, block_size, kv_heads, head_dim = k.shape
        joint = torch.full((blocks, kv_heads, block_size, 2 * head_dim), float("nan"), dtype=k.dtype)
        k_view, v_view = joint.transpose(1, 2).split(head_dim, dim=-1)  # as export/vllm_plugin.py makes them
        k_view.copy_(k)
        v_view.copy_(v)
        return (x, k_view, v_view, *args[3:])
    if layout == "qkv":  # args 1 and 2: query and key, views of one fused qkv projection (the v heads NaN)
        query, key = args[1], args[2]
        tokens, heads, head_dim = query.shape
        width = (heads + 2 * key.shape[1]) * head_dim
        fused = torch.full((tokens, width), float("nan"), dtype=query.dtype)
        # as_strided: the token stride even for one token, as a split of the projection gives it
        q_view = fused.as_strided(query.shape, (width, head_dim, 1), 0)
        k_view = fused.as_strided(key.shape, (width, head_dim, 1), heads * head_dim)
        q_view.copy_(query)
        k_view.copy_(key)
        return (args[0], q_view, k_view, *args[3:])
    if layout == "padded" and x.dim() >= 2:
        wide = torch.full((*x.shape[:-1], x.shape[-1] + PAD_ELEMENTS), float("nan"), dtype=x.dtype)
        view = wide[..., :x.shape[-1]]
    else:
        return args
    view.copy_(x)
    return (view, *args[1:])


def make_data(target: Target, case: Case, salt: bytes = b"") -> CaseData:
    def inputs(kind: str, seed_kind: str) -> tuple:
        gen = generator(target, case.shape, case.dtype, seed_kind, case.seed, salt)
        return with_scalars(target, tuple(target.make_inputs(case.shape, case.dtype, gen, kind)), case.scalars)

    args = inputs(case.kind, case.kind)
    if case.sample and target.rows_problem is not None and not case.refill:
        return CaseData(args=lay_out(args, case.layout), reference=(), golden=(), rows_pending=True)
    a = expected(target, args)
    data = CaseData(args=lay_out(args, case.layout), reference=a.reference, golden=a.golden, written=a.written,
                    written_golden=a.written_golden, alternate=functools.partial(other_references, target, args))
    if case.refill:
        data.refill_args = inputs("normal", "refill")
        r = expected(target, data.refill_args)
        data.refill_reference, data.refill_golden = r.reference, r.golden
        data.refill_written, data.refill_written_golden = r.written, r.written_golden
    return data


def answer_rows(target: Target, data: CaseData, masks: list | None, tf32: bool = False) -> CaseData:
    """A sampled range case's reference and golden (with its products through TF32 where `tf32`), made after its
    run: only at the output rows its programs wrote (`masks`: per output, the elements written), by the target's
    rows_problem, the other rows NaN (nothing compares them: judge.compare._sampled). A 2048-row prefill chunk's
    reference is seconds, a drawn program's rows of it milliseconds. Where the masks do not fit the outputs' rows,
    or cover half of them or more: the whole answers."""
    total, masks = data.args[0].shape[0], list(masks or ())
    fits = masks and all(isinstance(m, torch.Tensor) and m.dim() and m.shape[0] == total for m in masks)
    rows = torch.stack([m.reshape(total, -1).any(1) for m in masks]).any(0).nonzero().flatten().tolist() if fits else []
    cut = target.rows_problem if rows and 2 * len(rows) < total else None
    args, taken = cut(data.args, rows) if cut else (data.args, [])
    whole = cut is None
    a = expected(target, args)
    reference = tf32_reference(target, args) if tf32 else a.reference

    def spread(outs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        if whole:
            return outs
        full = tuple(torch.full((total, *o.shape[1:]), float("nan") if o.is_floating_point() else 0, dtype=o.dtype)
                     for o in outs)
        for f, o in zip(full, outs):
            f[taken] = o
        return full

    return dataclasses.replace(data, reference=spread(reference), golden=spread(a.golden), rows_pending=False,
                               alternate=lambda: [spread(o) for o in other_references(target, args, tf32)])
