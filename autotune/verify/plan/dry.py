"""The dry calls: the launcher called at every served shape in every dtype on stand-ins of the full size, whose
large tensors are left unfilled (the device records the launches and runs none)."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from autotune.targets.base import Shape, Target, numel
from autotune.verify.plan.cases import served_calls
from autotune.verify.plan.config import PlanConfig
from autotune.verify.plan.followup import probe_shapes


class _NoLargeValues(TorchDispatchMode):
    """make_inputs at a served shape for its layout alone: an op that makes or reads a large tensor gives an unfilled
    tensor of the shape, dtype and strides the op would give (a draw or fill in place: its tensor; a factory, an
    elementwise op on dense operands or a join: dense, in the dtype the op gives at one element, since their meta
    kernels are Python references that import torch._dynamo, 2 s of a judging; any other op: worked out on the
    meta device); an elementwise op whose small operands broadcast to a large result is large too (softmax's masks
    at a vocabulary's width: 11.7 s of its dry calls, before the first case); views run as usual, and so do ops on
    small tensors, which may decide shapes (prefill's chunk lengths)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # as the host's Recorder: no torch._dynamo import (3 s) for a guard nothing here needs

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = _tensors((*args, *kwargs.values()))
        size = tuple(next((a for a in args if isinstance(a, (list, tuple))), ())) if not tensors else ()
        pointwise = torch.Tag.pointwise in func.tags
        broadcast = _broadcast(tensors) if pointwise and tensors else None
        large = any(t.numel() > 1 << 16 for t in tensors) or (size and numel(size) > 1 << 16) or (
            broadcast is not None and numel(broadcast) > 1 << 16)  # small operands, large result
        if not large or torch.Tag.view_copy in func.tags or func.is_view:
            return func(*args, **kwargs)
        written = func._schema.arguments[0].alias_info if func._schema.arguments else None
        if written is not None and written.is_write:
            return args[0]
        one, shape = None, size
        if not tensors and "memory_format" not in kwargs:
            one = func(*[[1] * len(size) if isinstance(a, (list, tuple)) else a for a in args], **kwargs)
        elif pointwise and broadcast is not None:
            shape = broadcast
            if all(t.is_contiguous() for t in tensors if t.shape == shape):
                one = func(*torch.utils._pytree.tree_map(_one, args), **torch.utils._pytree.tree_map(_one, kwargs))
        elif func is torch.ops.aten.cat.default and all(t.dim() == tensors[0].dim() > 0 for t in tensors):
            dim = (args[1] if len(args) > 1 else kwargs.get("dim", 0)) % tensors[0].dim()
            shape = (*tensors[0].shape[:dim], sum(t.shape[dim] for t in tensors), *tensors[0].shape[dim + 1:])
            one = func([_one(t) for t in tensors], dim)
        if isinstance(one, torch.Tensor):
            return torch.empty(shape, dtype=one.dtype)
        meta = torch.utils._pytree.tree_map(
            lambda a: a.to("meta") if isinstance(a, torch.Tensor) else a, (args, kwargs))
        out = func(*meta[0], **{**meta[1], **({"device": "meta"} if "device" in kwargs or not tensors else {})})
        return torch.utils._pytree.tree_map(
            lambda o: torch.empty_strided(o.shape, o.stride(), dtype=o.dtype) if isinstance(o, torch.Tensor) else o,
            out)


def _tensors(values) -> list[torch.Tensor]:
    """The tensors among an aten op's arguments: each, or in a list of them (`Tensor[]`, aten's only nesting; a
    pytree walk per op was most of paged attention's dry calls: 67,518 small ops)."""
    found = []
    for v in values:
        if isinstance(v, torch.Tensor):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            found += [t for t in v if isinstance(t, torch.Tensor)]
    return found


def _broadcast(tensors) -> tuple[int, ...] | None:
    """The shape these tensors broadcast to (None where they do not: the op itself says so)."""
    try:
        return tuple(torch.broadcast_shapes(*(t.shape for t in tensors)))
    except RuntimeError:
        return None


def _one(a):
    """A tensor argument at one element (its dims kept: a 0-d tensor promotes types as a scalar does)."""
    return a.new_zeros((1,) * a.dim()) if isinstance(a, torch.Tensor) else a


def layout_of(target: Target, shape: Shape, dtype: torch.dtype) -> tuple:
    """The arguments a call at this shape gets, their values aside (large random tensors are left unfilled)."""
    gen = torch.Generator().manual_seed(0)
    with _NoLargeValues():
        return tuple(target.make_inputs(shape, dtype, gen, "normal"))


def dry_calls(target: Target, shapes, config: PlanConfig):
    """(shape, dtype, arguments without values) for each served call, made as they are needed."""
    for shape, dtype in served_calls(target, shapes, config):
        yield shape, dtype, layout_of(target, shape, dtype)


def probe_calls(target: Target, served, config: PlanConfig) -> list[tuple[Shape, torch.dtype, tuple]]:
    """(shape, dtype, arguments without values) of the smaller shapes that may make a launch only a served shape
    made (`served`: its (shape, dtype)): the served shape's ordinary cut with one dim raised alone, to its served
    value and to the first value of the served value's power-of-two bucket (a block or a constexpr that follows a
    size, as next_power_of_2(tokens) does, is the same over the bucket). A raise the target's inputs refuse (a
    query group that no longer divides) is left out."""
    found: dict[tuple[Shape, torch.dtype], tuple] = {}
    for shape, dtype in served:
        for probe in probe_shapes(target, shape, config):
            if (probe, dtype) not in found:
                try:
                    found[(probe, dtype)] = layout_of(target, probe, dtype)
                except (ValueError, RuntimeError, AssertionError, ZeroDivisionError):
                    continue  # the op has no such call
    return [(shape, dtype, args) for (shape, dtype), args in found.items()]
