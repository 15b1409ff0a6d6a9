"""A correct persistent RMSNorm as production launchers size one: as many programs as the GPU has SMs, read from
`torch.cuda.get_device_properties` (vLLM's persistent matmul, Triton's persistent tutorial), each looping over rows
pid, pid + NUM_SMS, ... The checker answers the query as the GPU it judges for, on the interpreter too."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_persistent(x_ptr, w_ptr, y_ptr, rows, cols, x_stride, y_stride, eps, NUM_SMS: tl.constexpr,
                         BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    for row in range(tl.program_id(0), rows, NUM_SMS):
        x = tl.load(x_ptr + row * x_stride + offs, mask=mask, other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / cols + eps)
        tl.store(y_ptr + row * y_stride + offs, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    rows, cols = x2.shape
    y = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    num_sms = torch.cuda.get_device_properties("cuda").multi_processor_count
    _rms_norm_persistent[(max(1, min(rows, num_sms)),)](x2, weight, y, rows, cols, x2.stride(0), y.stride(0), eps,
                                                       NUM_SMS=num_sms, BLOCK=triton.next_power_of_2(cols))
    return y.reshape(shape)
