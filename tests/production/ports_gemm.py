"""Production GEMM-shaped Triton kernels (and a quantizing norm) fitted to autotune's targets, as in ports.py. vLLM's
fused MoE kernel for fused_moe (FlagGems' Triton token sort and top-k sum and Liger's SwiGLU where vLLM launches
CUDA ops) and, as one expert, for int8_linear (its weight-only int8 path) and linear; FlagGems' fused add + RMSNorm
then SGLang's per-token int8 quantization for fused_add_rms_norm_quant; SGLang's MoE activation for silu_and_mul.
Nothing of the kernels' code is in this repository: `Port.candidate()` takes it from the wheels at test time.
"""

from __future__ import annotations

from tests.production.ports import FLAG_GEMS, LIGER, SGLANG, Port, vllm_file
from tests.production.wheels import Source

VLLM_FUSED_MOE = vllm_file("model_executor/layers/fused_moe/fused_moe.py")
VLLM_NAMES = ("write_zeros_to_output", "fused_moe_kernel")
# FlagGems' Triton moe_align_block_size and moe_sum: its stand-ins for vLLM's CUDA ops of those names
FLAG_GEMS_ALIGN = (Source(*FLAG_GEMS, "flag_gems/fused/moe_align_block_size.py"),
                   ("ceil_div", "moe_align_block_size_stage1", "moe_align_block_size_stage2_vec",
                    "moe_align_block_size_stage2", "moe_align_block_size_stage3", "moe_align_block_size_stage4"))
FLAG_GEMS_MOE_SUM = (Source(*FLAG_GEMS, "flag_gems/fused/moe_sum.py"), ("moe_sum_kernel",))
LIGER_SWIGLU = (Source(*LIGER, "liger_kernel/ops/swiglu.py"), ("silu", "_swiglu_forward_kernel"))
SGLANG_MOE_KERNELS = Source(*SGLANG, "sglang/kernels/ops/moe/fused_moe_triton_kernels.py")
SGLANG_INT8_QUANT = (Source(*SGLANG, "sglang/kernels/ops/quantization/int8_kernel.py"), ("_per_token_quant_int8",))
FLAG_GEMS_PROGRAM_ID = (Source(*FLAG_GEMS, "flag_gems/utils/triton_lang_extension.py"), ("program_id",))

# EDIT (static policy): vLLM's tensor-descriptor path (USE_TD, taken only when VLLM_TRITON_USE_TD is set, never
# with quantized weights) calls tl.make_tensor_descriptor and the descriptors' .load, which the checker's
# allow-list refuses (they need a host allocator); both `if USE_TD:` branches are cut, leaving the pointer path
# every launch here takes (USE_TD=False) as it is
VLLM_NO_TD = (
    ("""    if USE_TD:
        # ``tt.descriptor_gather`` requires block_shape[0] == 1 and i32 idx.
        m_td = num_valid_tokens // top_k
        a_desc = tl.make_tensor_descriptor(
            base=a_ptr,
            shape=(m_td, K),
            strides=(stride_am, stride_ak),
            block_shape=(1, BLOCK_SIZE_K),
        )
        b_desc = tl.make_tensor_descriptor(
            base=b_ptr + off_experts * stride_be,
            shape=(N, K),
            strides=(stride_bn, stride_bk),
            block_shape=(BLOCK_SIZE_N, BLOCK_SIZE_K),
        )
        gather_idx = (offs_token // top_k).to(tl.int32)
    elif SWAP_AB:""", "    if SWAP_AB:"),
    ("""        if USE_TD:
            a = a_desc.gather(gather_idx, k * BLOCK_SIZE_K)
            b = b_desc.load([pid_n * BLOCK_SIZE_N, k * BLOCK_SIZE_K]).T
        elif SWAP_AB:""", "        if SWAP_AB:"),
)

# vLLM's fused_moe_kernel launch (invoke_fused_moe_triton_kernel), its get_default_config and, for its CUDA token
# sort, FlagGems' Triton one: shared by the ports of the kernel
VLLM_LAUNCH = '''
def _vllm_default_config(M, E):
    """vLLM's get_default_config (fused_moe.py), general branch: bf16/fp16/fp32 and int8_w8a16 without a block
    shape, on CUDA (not ROCm), VLLM_BATCH_INVARIANT unset; no tuned JSON config for these shapes."""
    block_m = 16 if M <= 32 else 32 if M <= 96 else 64 if M <= 512 else 128
    return {"BLOCK_SIZE_M": block_m, "BLOCK_SIZE_N": 64 if M <= 64 else 128,
            "BLOCK_SIZE_K": 128 if M <= 64 else 64, "GROUP_SIZE_M": 16 if M // max(E, 1) > 128 else 1,
            "SPLIT_K": 1, "num_warps": 4 if M <= 128 else 8, "num_stages": 4 if M <= 32 else 3}


def _invoke_fused_moe_kernel(A, B, C, B_scale, topk_weights, sorted_token_ids, expert_ids, num_tokens_post_padded,
                             mul_routed_weight, top_k, config, use_int8_w8a16):
    """vLLM's invoke_fused_moe_triton_kernel for the unquantized and int8_w8a16 (per-channel) paths: no bias, no
    activation scales, no SWAP_AB (fp8 only), no tensor descriptors (VLLM_TRITON_USE_TD unset)."""
    M = A.size(0)
    num_tokens = M * top_k
    # fused_experts_impl's compute_type: the activations' dtype
    if A.dtype == torch.bfloat16:
        compute_type = tl.bfloat16
    elif A.dtype == torch.float16:
        compute_type = tl.float16
    else:
        compute_type = tl.float32
    if sorted_token_ids is not None:
        EM = sorted_token_ids.size(0)
        if A.size(0) < config["BLOCK_SIZE_M"]:
            EM = min(sorted_token_ids.size(0), A.size(0) * top_k * config["BLOCK_SIZE_M"])
    else:
        EM = num_tokens * config["BLOCK_SIZE_M"]
    BLOCK_SIZE_M, BLOCK_SIZE_N = config["BLOCK_SIZE_M"], config["BLOCK_SIZE_N"]
    grid = (triton.cdiv(EM, BLOCK_SIZE_M) * triton.cdiv(B.size(1), BLOCK_SIZE_N),)
    fused_moe_kernel[grid](
        A, B, C, None, None, B_scale, topk_weights, sorted_token_ids, expert_ids, num_tokens_post_padded,
        B.size(1), B.size(2), EM, num_tokens, A.stride(0), A.stride(1), B.stride(0), B.stride(2), B.stride(1),
        C.stride(1), C.stride(2), 0, 0,
        B_scale.stride(0) if B_scale is not None and B_scale.ndim >= 2 else 0,
        B_scale.stride(2) if B_scale is not None and B_scale.ndim == 3 else 0,
        B_scale.stride(1) if B_scale is not None and B_scale.ndim >= 2 else 0,
        0, 0, 0, 0,
        MUL_ROUTED_WEIGHT=mul_routed_weight, top_k=top_k, compute_type=compute_type, use_fp8_w8a8=False,
        use_int8_w8a8=False, use_int8_w8a16=use_int8_w8a16, per_channel_quant=False,
        naive_block_assignment=sorted_token_ids is None, HAS_BIAS=False, BLOCK_SIZE_K=config["BLOCK_SIZE_K"],
        SWAP_AB=False, USE_TD=False, BLOCK_SIZE_M=BLOCK_SIZE_M, BLOCK_SIZE_N=BLOCK_SIZE_N,
        GROUP_SIZE_M=config["GROUP_SIZE_M"], SPLIT_K=1, num_warps=config["num_warps"], num_stages=config["num_stages"])


def _flag_gems_moe_align_block_size(topk_ids, block_size, num_experts):
    """FlagGems' moe_align_block_size, its Triton stand-in for vLLM's CUDA op of that name: its buffers and its four
    Triton stages (its TLE cluster paths need Triton-TLE, which Triton 3.9 is not)."""
    numel = topk_ids.numel()
    max_num_tokens_padded = numel + num_experts * (block_size - 1)
    sorted_token_ids = torch.empty((max_num_tokens_padded,), dtype=torch.int32, device=topk_ids.device)
    max_num_m_blocks = triton.cdiv(max_num_tokens_padded, block_size)
    expert_ids = torch.empty((max_num_m_blocks,), dtype=torch.int32, device=topk_ids.device)
    num_tokens_post_pad = torch.empty((1,), dtype=torch.int32, device=topk_ids.device)
    numel_sorted_token_ids = sorted_token_ids.numel()
    numel_expert_ids = expert_ids.numel()
    grid = (num_experts,)
    tokens_per_thread = triton.next_power_of_2(ceil_div(numel, num_experts))
    block_size_sorted = triton.next_power_of_2(ceil_div(numel_sorted_token_ids, num_experts))
    block_size_expert = triton.next_power_of_2(ceil_div(numel_expert_ids, num_experts))
    cumsum = torch.zeros((num_experts + 1,), dtype=torch.int32, device=topk_ids.device)
    tokens_cnts = torch.zeros((num_experts + 1, num_experts), dtype=torch.int32, device=topk_ids.device)
    moe_align_block_size_stage1[grid](topk_ids, tokens_cnts, num_experts, numel, tokens_per_thread,
                                      sorted_token_ids, expert_ids, numel_sorted_token_ids, numel_expert_ids,
                                      block_size_sorted, block_size_expert)
    if num_experts == triton.next_power_of_2(num_experts):
        moe_align_block_size_stage2_vec[grid](tokens_cnts, num_experts)
    else:
        moe_align_block_size_stage2[grid](tokens_cnts, num_experts)
    moe_align_block_size_stage3[(1,)](num_tokens_post_pad, tokens_cnts, cumsum, num_experts,
                                      triton.next_power_of_2(num_experts), block_size)
    moe_align_block_size_stage4[grid](topk_ids, sorted_token_ids, expert_ids, tokens_cnts, cumsum, num_experts,
                                      block_size, numel, tokens_per_thread)
    return sorted_token_ids, expert_ids, num_tokens_post_pad
'''

FUSED_MOE = VLLM_LAUNCH + '''

def fused_moe(hidden_states, w13, w2, topk_weights, topk_ids):
    """vLLM's fused_experts_impl (bf16/fp16/fp32, SiLU, the weights applied after the down projection, no expert
    map) around its two fused_moe_kernel launches; where vLLM launches CUDA ops, Triton ones: the token sort
    (moe_align_block_size) and the top-k sum (_C.moe_sum) FlagGems', the SiLU-and-mul (_C.silu_and_mul) Liger's."""
    hidden_states = hidden_states.contiguous()
    topk_ids = topk_ids.contiguous()
    topk_weights = topk_weights.contiguous()
    num_tokens, _ = hidden_states.shape
    E, N, _ = w13.shape
    K = w2.size(1)
    top_k_num = topk_ids.size(1)
    M = num_tokens
    config = _vllm_default_config(M, E)
    dtype = hidden_states.dtype
    cache13 = torch.empty(M * top_k_num * max(N, K), device=hidden_states.device, dtype=dtype)
    intermediate_cache1 = cache13[: M * top_k_num * N].view(M, top_k_num, N)
    intermediate_cache3 = cache13[: M * top_k_num * K].view(M, top_k_num, K)
    out_hidden_states = torch.empty_like(hidden_states)
    # vLLM's _prepare_expert_assignment skips the sort when num_tokens * top_k * 4 <= E (a block per pair,
    # unsorted) with a count made on the host (torch.full), which the checker's allow-list refuses: the sort serves
    # every batch here
    sorted_token_ids, expert_ids, num_tokens_post_padded = _flag_gems_moe_align_block_size(
        topk_ids, config["BLOCK_SIZE_M"], E)
    _invoke_fused_moe_kernel(hidden_states, w13, intermediate_cache1, None, topk_weights, sorted_token_ids,
                             expert_ids, num_tokens_post_padded, False, top_k_num, config, False)
    # Liger's SwiGLU forward, one program per (token, expert) row: its one row stride serves gate, up and the
    # output, so the activation is the left half of a row as wide as gate and up (vLLM's intermediate_cache2 as
    # a view, which the second GEMM reads by its strides)
    gate_up = intermediate_cache1.view(-1, N)
    act = torch.empty((M * top_k_num, N), device=hidden_states.device, dtype=dtype)
    BLOCK_SIZE = triton.next_power_of_2(N // 2)
    _swiglu_forward_kernel[(M * top_k_num,)](gate_up[:, : N // 2], gate_up[:, N // 2:], act, N, 1.0, n_cols=N // 2,
                                             BLOCK_SIZE=BLOCK_SIZE, num_warps=8 if BLOCK_SIZE >= 2048 else 4)
    intermediate_cache2 = act[:, : N // 2]
    _invoke_fused_moe_kernel(intermediate_cache2, w2, intermediate_cache3, None, topk_weights, sorted_token_ids,
                             expert_ids, num_tokens_post_padded, True, 1, config, False)
    # FlagGems' moe_sum (autotuned over its block sizes)
    moe_sum_kernel[lambda meta: (M, triton.cdiv(K, meta["BLOCK_SIZE"]))](
        intermediate_cache3, out_hidden_states, M, top_k_num, K, *intermediate_cache3.stride(),
        *out_hidden_states.stride())
    return out_hidden_states
'''

WEIGHT_ONLY_INT8 = " on its int8_w8a16 path (weight-only int8, per-channel scales [E, N])"


def _one_expert(name, scale):
    return VLLM_LAUNCH + f'''

def {name}(x, weight{", scale" if scale else ""}):
    """vLLM's fused MoE GEMM{WEIGHT_ONLY_INT8 if scale else ""} as one expert taking every token:
    fused_experts_impl's first launch with top_k 1 and no routed weight."""
    x = x.contiguous()
    M, K = x.shape
    N = weight.shape[0]
    B = weight.contiguous().view(1, N, K)
    {"B_scale = scale.contiguous().view(1, N)" if scale else "B_scale = None"}
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    config = _vllm_default_config(M, 1)
    # vLLM sorts the tokens by expert (moe_align_block_size): here every token is routed to the one expert (an
    # all-zero topk_ids)
    topk_ids = torch.zeros((M, 1), dtype=torch.int32, device=x.device)
    sorted_token_ids, expert_ids, num_tokens_post_padded = _flag_gems_moe_align_block_size(
        topk_ids, config["BLOCK_SIZE_M"], 1)
    _invoke_fused_moe_kernel(x, B, y.view(M, 1, N), B_scale, None, sorted_token_ids, expert_ids,
                             num_tokens_post_padded, False, 1, config, {bool(scale)})
    return y
'''

FUSED_ADD_RMS_NORM_QUANT = '''
def fused_add_rms_norm_quant(x, residual, weight, eps):
    """FlagGems' fused_add_rms_norm (in place: on copies here, y in x's dtype, the sum from fp32) then SGLang's
    per_token_quant_int8 of y, the unfused pair the target's reference is; vLLM's fused op is CUDA."""
    shape = x.shape
    N = shape[-1]
    y = x.reshape(-1, N).clone()
    s = residual.reshape(-1, N).clone()
    M = y.shape[0]
    fused_add_rms_norm_kernel[M,](y, s, weight, N, 1, N, 1, N, eps, triton.next_power_of_2(N))
    x_q = torch.empty((M, N), device=x.device, dtype=torch.int8)
    scales = torch.empty((M, 1), device=x.device, dtype=torch.float32)
    BLOCK = triton.next_power_of_2(N)
    _per_token_quant_int8[(M,)](y, x_q, scales, None, stride_x=y.stride(-2), stride_xq=x_q.stride(-2), N=N,
                                CAL_SUM=False, BLOCK=BLOCK, IS_HIP=False, num_warps=min(max(BLOCK // 256, 1), 8),
                                num_stages=1)
    return x_q.view(shape), scales.view(*shape[:-1], 1), s.view(shape)
'''

SILU_AND_MUL = '''
def silu_and_mul(x):
    """SGLang's act_and_mul_triton without an expert filter: one program per row, 512 columns a step."""
    shape = x.shape
    x2 = x.reshape(-1, shape[-1]).contiguous()
    out = torch.empty((x2.shape[0], shape[-1] // 2), dtype=x.dtype, device=x.device)
    act_and_mul_kernel[(x2.shape[0],)](x2, out, x2.shape[1], None, 1, BLOCK_SIZE=512, ACTIVATION_TYPE="silu",
                                       SWIGLU_LIMIT=0.0, HAS_SWIGLU_LIMIT=False, HAS_EXPERT_FILTER=False)
    return out.view(*shape[:-1], shape[-1] // 2)
'''

# EDIT (static policy): SGLang's _apply_activation raises ValueError for an activation it lacks, in a branch no
# constexpr ACTIVATION_TYPE of its own reaches; the allow-list refuses the builtin in a kernel: the same compile-time
# refusal as tl.static_assert
SGLANG_NO_RAISE = (('raise ValueError(f"Unsupported activation: {ACTIVATION_TYPE}")',
                    'tl.static_assert(False, "Unsupported activation")'),)

GEMM_PORTS = (
    Port("vllm/fused_moe_kernel", "fused_moe", VLLM_FUSED_MOE, VLLM_NAMES, FUSED_MOE,
         helpers=(FLAG_GEMS_ALIGN, LIGER_SWIGLU, FLAG_GEMS_MOE_SUM), edits=VLLM_NO_TD),
    Port("vllm/fused_moe_kernel_int8_w8a16", "int8_linear", VLLM_FUSED_MOE, VLLM_NAMES,
         _one_expert("int8_linear", True), helpers=(FLAG_GEMS_ALIGN,), edits=VLLM_NO_TD),
    Port("flag_gems+sglang/fused_add_rms_norm_per_token_quant_int8", "fused_add_rms_norm_quant",
         Source(*FLAG_GEMS, "flag_gems/fused/fused_add_rms_norm.py"), ("fused_add_rms_norm_kernel",),
         FUSED_ADD_RMS_NORM_QUANT,
         # SGLang's module: `from triton.language.extra import libdevice` (its ROCm branch's round)
         "from triton.language.extra import libdevice\n",
         helpers=(FLAG_GEMS_PROGRAM_ID, SGLANG_INT8_QUANT),
         # FlagGems' `tle.program_id` is its helper, taken from its own module. EDIT (static policy and the
         # interpreter): SGLang's CUDA branch rounds by `tl.extra.cuda.libdevice.round`, a backend module the
         # allow-list refuses and the interpreter cannot run; its ROCm branch's spelling, the portable
         # `libdevice.round` of its own import, is the same CUDA __nv_roundf once compiled for NVIDIA
         edits=(("tle.program_id(", "program_id("), ("tl.extra.cuda.libdevice.round(", "libdevice.round(")),
         from_jit=True),
    Port("vllm/fused_moe_kernel_dense", "linear", VLLM_FUSED_MOE, VLLM_NAMES, _one_expert("linear", False),
         helpers=(FLAG_GEMS_ALIGN,), edits=VLLM_NO_TD),
    Port("sglang/act_and_mul", "silu_and_mul", SGLANG_MOE_KERNELS, ("tanh", "_apply_activation", "act_and_mul_kernel"),
         SILU_AND_MUL, edits=SGLANG_NO_RAISE),
)
