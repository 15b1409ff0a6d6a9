"""Production attention kernels fitted to autotune's attention target, paged_attention (vLLM's own contract: a
paged KV cache [num_blocks, block_size, kv_heads, D], a block table, varlen query rows): what to take from which
wheel, and our launcher. See tests/production/ports.py for the rules (nothing of the kernels' code is in this
repository; `Port.candidate()` assembles a file at test time).

Verdicts (verify=quick, bfloat16 + float32, CPU interpreter):
- vllm/unified_attention: accepted since the interpreter's tl.dot sums a row alike wherever it sits in the tile;
  before, "race in kernel_unified_attention" at a GQA group that does not divide 16 (BLOCK_M 16, BLOCK_Q = 16 //
  group: a program's last 16 - BLOCK_Q * group rows are the next program's first query row, stored by both, equal
  on a GPU, one bit apart under numpy's sgemm).
- vllm/chunked_prefill_paged_decode: rejected, "NaN swallowed": a decode whose query holds a NaN gives 0 (see
  test_production.py's NOT_YET); its fp32 values are right on every edge and model shape, checked outside.
The decode_attention and prefill_attention targets, with their slot cache that no engine uses, were retired into
paged_attention (stop 40), and with them the ports fitted to that cache by transposed views (vLLM's and SGLang's
split-KV decodes, vLLM's unified attention as a prefill).
"""

from __future__ import annotations

from tests.production.ports import Port, vllm_file

UNIFIED = vllm_file("v1/attention/ops/triton_unified_attention.py")
# the jit helpers `kernel_unified_attention` imports from vllm.v1.attention.ops.triton_attention_helpers
UNIFIED_HELPERS = ((vllm_file("v1/attention/ops/triton_attention_helpers.py"),
                    ("cdiv_fn", "apply_softcap", "resolve_seq_and_query_len", "find_seq_idx", "init_softmax_M",
                     "compute_tile_loop_bounds", "compute_kv_seq_mask", "apply_alibi_to_score", "load_qq_bias_tile",
                     "softmax_step")),)
# the kernel, its KV cast and vLLM's tile-size choice; not taken: the Intel-only tensor-descriptor helpers
# (_load_q_td, _load_kv_tile_td, _store_output_td: called only under USE_TD / USE_TD_QO, which vLLM sets on XPU
# alone, so Triton never reaches them on NVIDIA) and the 3D path's reduce_segments (see the launchers)
UNIFIED_NAMES = ("_cast_kv_tile", "kernel_unified_attention", "_is_gemma3_attention", "_get_tile_size")

# Edits for the checker's static policy (reported with the ports; none changes what a bf16/fp16/fp32 cache computes):
# - the module's `float8_info = torch.finfo(current_platform.fp8_dtype())` (float8_e4m3fn on NVIDIA) feeds only the
#   FP8_MIN/FP8_MAX defaults of the kernel (the fp8-output clamp): torch.finfo, the fp8 dtype and reading `.min` of a
#   module-level value are all refused, so its two values are written in
# - `V.dtype == tl.float8e4nv` picks a P scale of 256 for an e4m3 cache (128 for other fp8): tl.float8e4nv is refused,
#   so an e4m3 cache would take 128 (bf16/fp16/fp32 caches take 1.0 either way)
UNIFIED_EDITS = (("float8_info.min", "-448.0"), ("float8_info.max", "448.0"), ("V.dtype == tl.float8e4nv", "False"))

# The 2D launch of vllm.v1.attention.ops.triton_unified_attention.unified_attention, with what the
# TritonAttention backend passes for a bf16/fp32 model: causal, no softcap/sinks/alibi/qq-bias/mm-prefix/R-SWA,
# no fp8 (q/k/v descales None, output_scale None, KVQuantMode.NONE = 0), no chunked attention, no tensor
# descriptors (NVIDIA). vLLM takes the 2D path when a batch holds a prefill or when no 3D softmax buffers are given;
# the 2D kernel serves decodes as well (the 3D path splits long decodes over segments for occupancy alone).
UNIFIED_LAUNCH = '''
def _unified_attention_2d(q, k, v, out, cu_seqlens_q, seqused_k, block_table, softmax_scale, sliding_window_val):
    block_size = v.shape[1]
    num_seqs = seqused_k.shape[0]
    num_query_heads = q.shape[1]
    num_kv_heads = k.shape[2]
    num_queries_per_kv = num_query_heads // num_kv_heads
    head_size = q.shape[2]
    BLOCK_M = 16 if num_queries_per_kv <= 16 else triton.next_power_of_2(num_queries_per_kv)
    BLOCK_Q = BLOCK_M // num_queries_per_kv
    # vLLM's tuned_large_head (head 256, BLOCK_M 32, 8 warps) is for Blackwell (capability family 100) only
    total_num_q_blocks = q.shape[0] // BLOCK_Q + num_seqs
    TILE_SIZE_PREFILL = _get_tile_size(head_size, sliding_window_val, q.element_size(), is_prefill=True)
    kernel_unified_attention[(total_num_q_blocks, num_kv_heads)](
        output_ptr=out, segm_output_ptr=None, segm_max_ptr=None, segm_expsum_ptr=None, query_ptr=q,
        key_cache_ptr=k, value_cache_ptr=v, sink_ptr=None, block_tables_ptr=block_table, seq_lens_ptr=seqused_k,
        alibi_slopes_ptr=None, qq_bias_ptr=None, k_scale_cache_ptr=None, v_scale_cache_ptr=None,
        scale=softmax_scale, q_scale=None, k_scale=None, v_scale=None, out_scale=1.0, softcap=0,
        num_query_heads=num_query_heads, num_queries_per_kv=num_queries_per_kv,
        block_table_stride=block_table.stride(0), query_stride_0=q.stride(0), query_stride_1=q.stride(1),
        output_stride_0=out.stride(0), output_stride_1=out.stride(1), qq_bias_stride_0=0,
        BLOCK_SIZE=block_size, TILE_SIZE=TILE_SIZE_PREFILL, HEAD_SIZE=head_size,
        HEAD_SIZE_PADDED=triton.next_power_of_2(head_size), USE_ALIBI_SLOPES=False, USE_ALIBI_SQRT=False,
        USE_QQ_BIAS=False, USE_SOFTCAP=False, USE_SINKS=False, SLIDING_WINDOW=sliding_window_val,
        USE_CAUSAL=True, USE_PER_SEQ_CAUSAL=False, per_seq_causal_ptr=None, USE_MM_PREFIX=False,
        MAX_MM_RANGES=0, mm_prefix_range_ptr=None, rswa_prefix_lens_ptr=seqused_k, R_SWA_WINDOW=0,
        USE_R_SWA=False, stride_k_cache_0=k.stride(0), stride_k_cache_1=k.stride(1), stride_k_cache_2=k.stride(2),
        stride_k_cache_3=k.stride(3), stride_v_cache_0=v.stride(0), stride_v_cache_1=v.stride(1),
        stride_v_cache_2=v.stride(2), stride_v_cache_3=v.stride(3), stride_ks_blk=None, stride_ks_slot=None,
        stride_ks_head=None, stride_vs_blk=None, stride_vs_slot=None, stride_vs_head=None,
        query_start_len_ptr=cu_seqlens_q, BLOCK_Q=BLOCK_Q, num_seqs=num_seqs, BLOCK_M=BLOCK_M,
        NUM_SEGMENTS_PER_SEQ=1, USE_FP8=False, IS_3D=False, KV_QUANT_MODE=0, Q_IS_FP8=False, CHUNK_LOOKBACK=-1,
        CHUNK_SIZE=-1, USE_TD=False, USE_TD_QO=False, MM_PREFIX_CLAMP_SW=False,
    )
    return out
'''

VLLM_PAGED = Port("vllm/unified_attention", "paged_attention", UNIFIED, UNIFIED_NAMES, UNIFIED_LAUNCH + '''

def paged_attention(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_table, scale, window, max_query_len,
                    max_seq_len):
    # the target's contract is vLLM's: k_cache/v_cache [num_blocks, block_size, kv_heads, D], cu_seqlens_q =
    # query_start_loc, seq_lens = seqused_k; window > 0 is vLLM's window_size (window - 1, 0), so
    # SLIDING_WINDOW = 1 + window_size[0] = window (0: none)
    out = torch.empty_like(q)
    return _unified_attention_2d(q, k_cache, v_cache, out, cu_seqlens_q, seq_lens, block_table, scale,
                                 window if window > 0 else 0)
''', helpers=UNIFIED_HELPERS, edits=UNIFIED_EDITS)


# vLLM's chunked_prefill_paged_decode (vllm/v1/attention/ops/chunked_prefill_paged_decode.py, its ROCm attention
# backend's path): prefix_prefill's context_attention_fwd for the sequences of more than one query row (its
# `_fwd_kernel`, reading this step's keys back from the cache as its KV_FROM_CACHE mode does), then
# `kernel_paged_attention_2d` for the decodes (filter_by_query_len), each over vLLM's older cache layout
# (K [num_blocks, kv_heads, D // x, block_size, x], V [num_blocks, kv_heads, D, block_size]) by its strides: our
# launcher passes views of the target's [num_blocks, block_size, kv_heads, D] caches in that layout, never a copy.
CHUNKED = vllm_file("v1/attention/ops/chunked_prefill_paged_decode.py")
PREFIX_PREFILL = (vllm_file("v1/attention/ops/prefix_prefill.py"), ("_paged_kv_cache_offsets", "_fwd_kernel"))
VLLM_CHUNKED = Port("vllm/chunked_prefill_paged_decode", "paged_attention", CHUNKED,
                    ("cdiv_fn", "kernel_paged_attention_2d"), '''
def paged_attention(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_table, scale, window, max_query_len,
                    max_seq_len):
    num_blocks, block_size, num_kv_heads, head_size = k_cache.shape
    x = 16 // k_cache.element_size()  # vLLM's key cache keeps 16 bytes of a key together innermost
    key_cache = k_cache.view(num_blocks, block_size, num_kv_heads, head_size // x, x).permute(0, 2, 3, 1, 4)
    value_cache = v_cache.permute(0, 2, 3, 1)
    output = torch.empty_like(q)
    num_seqs = seq_lens.shape[0]
    num_query_heads = q.shape[1]
    num_queries_per_kv = num_query_heads // num_kv_heads
    # read only to dequantize an fp8 cache (`if K_load.dtype.is_fp8()`), never for bf16/fp16/fp32
    k_scale = torch.zeros((1,), dtype=torch.float32, device=q.device)
    v_scale = torch.zeros((1,), dtype=torch.float32, device=q.device)
    if max_query_len > 1:  # context_attention_fwd(q, None, None, ..., skip_decode=True): k, v are placeholders
        BLOCK_M = 128
        _fwd_kernel[(num_seqs, num_query_heads, triton.cdiv(max_query_len, BLOCK_M))](
            q, q, q, key_cache, value_cache, None, block_table, scale, k_scale, v_scale, 1.0, cu_seqlens_q,
            seq_lens, x, output, block_table.stride(0), block_table.stride(1), q.stride(0), q.stride(1),
            q.stride(2), q.stride(0), q.stride(1), q.stride(2), q.stride(0), q.stride(1), q.stride(2),
            output.stride(0), output.stride(1), output.stride(2),
            stride_k_cache_bs=key_cache.stride(0), stride_k_cache_h=key_cache.stride(1),
            stride_k_cache_d=key_cache.stride(2), stride_k_cache_bl=key_cache.stride(3),
            stride_k_cache_x=key_cache.stride(4), stride_v_cache_bs=value_cache.stride(0),
            stride_v_cache_h=value_cache.stride(1), stride_v_cache_d=value_cache.stride(2),
            stride_v_cache_bl=value_cache.stride(3), BLOCK_SIZE=32, PHYSICAL_BLOCK_SIZE=block_size,
            num_queries_per_kv=num_queries_per_kv, IN_PRECISION=None, BLOCK_DMODEL=head_size,
            BLOCK_DMODEL_PADDED=triton.next_power_of_2(head_size), SLIDING_WINDOW=window, SKIP_DECODE=True,
            USE_FP8=False, BLOCK_M=BLOCK_M, BLOCK_N=64, num_unroll_cache=4, num_unroll_request=1, num_warps=4,
            num_stages=1, USE_SINKS=False, CAUSAL=True, KV_FROM_CACHE=True,
        )
    is_pow2 = block_size & (block_size - 1) == 0
    kernel_paged_attention_2d[(num_seqs, num_kv_heads)](
        output_ptr=output, query_ptr=q, key_cache_ptr=key_cache, value_cache_ptr=value_cache, sink_ptr=None,
        block_tables_ptr=block_table, seq_lens_ptr=seq_lens, alibi_slopes_ptr=None, scale=scale, k_scale=k_scale,
        v_scale=v_scale, out_scale_inv=1.0, num_query_heads=num_query_heads, num_queries_per_kv=num_queries_per_kv,
        num_queries_per_kv_padded=max(triton.next_power_of_2(num_queries_per_kv), 16),
        block_table_stride=block_table.stride(0), query_stride_0=q.stride(0), query_stride_1=q.stride(1),
        output_stride_0=output.stride(0), output_stride_1=output.stride(1),
        BLOCK_SIZE=min(block_size, 128) if is_pow2 else 32, PHYSICAL_BLOCK_SIZE=block_size, HEAD_SIZE=head_size,
        HEAD_SIZE_PADDED=triton.next_power_of_2(head_size), USE_ALIBI_SLOPES=False, SLIDING_WINDOW=window, x=x,
        stride_k_cache_0=key_cache.stride(0), stride_k_cache_1=key_cache.stride(1),
        stride_k_cache_2=key_cache.stride(2), stride_k_cache_3=key_cache.stride(3),
        stride_k_cache_4=key_cache.stride(4), stride_v_cache_0=value_cache.stride(0),
        stride_v_cache_1=value_cache.stride(1), stride_v_cache_2=value_cache.stride(2),
        stride_v_cache_3=value_cache.stride(3), filter_by_query_len=True, query_start_len_ptr=cu_seqlens_q,
        USE_SINKS=False, USE_FP8=False,
    )
    return output
''', helpers=(PREFIX_PREFILL,), edits=(("float8_info.min", "-448.0"), ("float8_info.max", "448.0")))


ATTENTION_PORTS = (VLLM_PAGED, VLLM_CHUNKED)
