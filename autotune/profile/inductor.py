"""Kernels Inductor generated (torch.compile: vLLM's default configuration) mapped to targets by the ops they fuse.

Inductor names each kernel it generates after the aten ops fused into it, sorted and joined by '_':
`graph_0_cpp_fused_add_mean_mul_onednn_mm_pow_rsqrt_6` on a CPU (the profiler records it when Inductor's
`cpp.enable_kernel_profile` is on, as `engine.compiled=true` launches vLLM), `triton_red_fused_add_mean_mul_pow_rsqrt_6`
on a GPU. A kernel whose ops hold a target's formula computes that target (first rule that fits wins):

    rotary_embedding     mul, sub and a gather of the cache rows (index_select / index) or cos / sin
    fused_add_rms_norm   pow, mean, rsqrt (in vLLM's layers every norm but the model's first adds the residual)
    silu_and_mul         silu, mul
    softmax              _softmax, or amax with exp and sum

Such kernels record no shapes. A norm's and a SiLU-and-mul's input is the output of the GEMM just before it in the
same compiled call (o_proj or down_proj [T, hidden], gate_up [T, 2I]: vLLM's layer order), so their case is that
GEMM's (M, N); the model's first norm, behind the embedding, has none before it and takes the (M, K) of the GEMM it
feeds (qkv's input [T, hidden]); rotary's heads are not in any neighbour's shape, so its case stays unknown
and the checker uses the target's own shapes for it. The GEMMs themselves stay extern calls (`_C::onednn_mm`,
aten::mm), mapped as in the eager configuration.
"""

from __future__ import annotations

import json
import re

KERNEL = re.compile(r"^(?:graph_\d+_)?(?:cpp|triton_[a-z]+)_fused_(?P<ops>\w+?)_\d+$")
# target -> groups of op names, one of each group present
RULES: tuple[tuple[str, tuple[frozenset[str], ...]], ...] = (
    ("rotary_embedding", (frozenset({"mul"}), frozenset({"sub"}), frozenset({"index_select", "index", "cos", "sin"}))),
    ("fused_add_rms_norm", (frozenset({"pow"}), frozenset({"mean"}), frozenset({"rsqrt"}))),
    ("silu_and_mul", (frozenset({"silu"}), frozenset({"mul"}))),
    ("softmax", (frozenset({"_softmax", "amax"}), frozenset({"_softmax", "exp"}), frozenset({"_softmax", "sum"}))),
)
FROM_GEMM = ("fused_add_rms_norm", "silu_and_mul")  # targets whose case is the preceding GEMM's (M, N)


def target_of(name: str) -> str | None:
    """The target an Inductor kernel's name says it computes; None for another kernel or another op."""
    found = KERNEL.match(name)
    if not found:
        return None
    ops = f"_{found['ops']}_"
    return next((target for target, groups in RULES
                 if all(any(f"_{op}_" in ops for op in group) for group in groups)), None)


def case_from_gemm(target: str, before: str, after: str) -> str:
    """The case of an Inductor kernel of `target` from the linear cases (M, N, K) of the GEMMs before and after it
    among its siblings ('' when neither gives it)."""
    if target not in FROM_GEMM:
        return ""
    if before:
        m, n, *_ = json.loads(before)
        return json.dumps([m, n])
    if after and target == "fused_add_rms_norm":
        m, _, k = json.loads(after)
        return json.dumps([m, k])
    return ""
