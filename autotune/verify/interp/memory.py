"""CPU tensors placed as CUDA's caching allocator places GPU tensors, so that no address tells the two apart.

PyTorch's CPU allocator aligns to 64 bytes (c10's gAlignment): measured on this machine, fresh CPU tensors sit
at data_ptr() % 512 in {0, 64, ..., 448}, while CUDA's caching allocator hands out blocks that start on
512-byte boundaries (kMinBlockSize = 512). A kernel or a launcher that branches on `data_ptr() % 512` (an
allowed query: vLLM's launchers check alignment) could then behave on the CPU as it never would on a GPU.

`aligned_empty(shape, dtype, stride=None)` is a plain CPU tensor at storage offset 0 whose storage starts on a
512-byte boundary (a slice of a bytearray, or an anonymous map from 1 MB up, through torch.frombuffer),
filled as fresh memory is under `torch.use_deterministic_algorithms` + `fill_uninitialized_memory` (NaN for
floats, the largest value for ints, True for bools), so an output the kernel never writes still shows.
`allocate_like_cuda(func, args, kwargs)` serves, from a TorchDispatchMode, the aten allocations a candidate's
launcher makes on the CPU (empty, empty_strided, empty_like, new_empty, new_empty_strided, zeros, zeros_like,
new_zeros, and the copies clone/contiguous make) from aligned storage; None where it does not apply (another
device, a non-strided layout, pinned memory, a memory format other than contiguous or preserve).
"""

from __future__ import annotations

import mmap

import numpy as np
import torch

CUDA_BLOCK_ALIGNMENT = 512  # bytes: CUDA caching allocator's kMinBlockSize, every block's start aligned to it
MAPPED_BYTES = 1 << 20  # storages this large are anonymous maps (a bytearray writes every byte when it is made)


def _fill_fresh(t: torch.Tensor) -> torch.Tensor:
    """What torch's deterministic mode writes into fresh memory."""
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return t.fill_(float("nan"))
    if t.dtype == torch.bool:
        return t.fill_(True)
    return t.fill_(torch.iinfo(t.dtype).max)


def _extent(shape, stride) -> int:
    """Elements a strided tensor spans (0 when it has none)."""
    if any(n == 0 for n in shape):
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(shape, stride))


def contiguous_strides(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(tuple(shape)):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


def aligned_empty(shape, dtype: torch.dtype, stride=None, fill: bool = True) -> torch.Tensor:
    """A CPU tensor of `shape` (and `stride`, default contiguous) whose storage starts on a 512-byte boundary,
    at storage offset 0; fresh-memory values unless `fill` is False (then zeros)."""
    shape = tuple(int(n) for n in shape)
    stride = contiguous_strides(shape) if stride is None else tuple(int(s) for s in stride)
    itemsize = torch.empty((), dtype=dtype).element_size()
    nbytes = max(_extent(shape, stride), 1) * itemsize  # a storage of at least one element, as CUDA's
    if nbytes >= MAPPED_BYTES:  # pages mapped on first touch: a served-size stand-in the host never reads is free
        raw: mmap.mmap | bytearray = mmap.mmap(-1, nbytes)  # page-aligned, zero-filled by the kernel
        pad = 0
    else:
        raw = bytearray(nbytes + CUDA_BLOCK_ALIGNMENT)
        pad = -np.frombuffer(raw, dtype=np.uint8).ctypes.data % CUDA_BLOCK_ALIGNMENT
    flat = torch.frombuffer(memoryview(raw)[pad:pad + nbytes], dtype=dtype)  # keeps `raw` alive
    if fill:
        _fill_fresh(flat)
    return flat.as_strided(shape, stride, 0)


def _like_strides(t: torch.Tensor, memory_format) -> tuple[int, ...] | None:
    """empty_like's strides: t's own under preserve_format when t is dense, else contiguous (None: a format
    this module does not serve)."""
    if memory_format in (None, torch.preserve_format):
        dense = t.is_contiguous() or _extent(t.shape, t.stride()) == t.numel()
        return tuple(t.stride()) if dense and t.numel() else contiguous_strides(t.shape)
    return contiguous_strides(t.shape) if memory_format == torch.contiguous_format else None


def _on_cpu(kwargs: dict, default: torch.device | None = None) -> bool:
    device = kwargs.get("device", default)
    strided = kwargs.get("layout") in (None, torch.strided)
    return torch.device(device or "cpu").type == "cpu" and strided and not kwargs.get("pin_memory")


def _request(name: str, args: tuple, kwargs: dict):
    """(shape, dtype, strides, zeros, source to copy) for an allocation op, None if it is not served here."""
    dtype = kwargs.get("dtype")
    if name in ("empty", "zeros", "empty_strided"):
        if not _on_cpu(kwargs) or kwargs.get("memory_format") not in (None, torch.contiguous_format):
            return None
        stride = args[1] if name == "empty_strided" else None
        return args[0], dtype or torch.get_default_dtype(), stride, name == "zeros", None
    t = args[0]
    if not isinstance(t, torch.Tensor) or not _on_cpu(kwargs, t.device):
        return None
    if name in ("new_empty", "new_zeros", "new_empty_strided"):
        stride = args[2] if name == "new_empty_strided" else None
        return args[1], dtype or t.dtype, stride, name == "new_zeros", None
    strides = _like_strides(t, kwargs.get("memory_format"))
    if strides is None:
        return None
    if name == "clone":
        return t.shape, t.dtype, strides, False, t
    return t.shape, dtype or t.dtype, strides, name == "zeros_like", None


_SERVED = {"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "zeros", "zeros_like",
           "new_zeros", "clone"}


def allocate_like_cuda(func, args: tuple, kwargs: dict, values: bool = True) -> torch.Tensor | None:
    """For a TorchDispatchMode's __torch_dispatch__: the result of an aten allocation op (or clone) made in
    512-byte aligned storage, or None when the op is not one served here (then run `func` as usual).
    `values=False`: the storage alone, neither filled nor copied into (for stand-ins whose values nobody reads)."""
    name = func.overloadpacket.__name__
    if name not in _SERVED:
        return None
    request = _request(name, tuple(args), kwargs or {})
    if request is None:
        return None
    shape, dtype, stride, zeros, source = request
    out = aligned_empty(shape, dtype, stride, fill=values and not zeros)
    return out.copy_(source) if source is not None and values else out
