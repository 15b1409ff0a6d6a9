"""The interpreter's speed-ups (autotune.verify.interp.fastpatch) change nothing it computes or refuses: the
frontend's block types and tensors, Triton's own errors for shapes it refuses, and a kernel's results (int32
index arithmetic that wraps, loads, stores, a dot) are the same before and after, on a first build of a shape
and on a remembered one. One fresh interpreter process (tests/verify/fastpatch_probe.py, ~5 s)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

PROBE = Path(__file__).parent / "fastpatch_probe.py"


@pytest.fixture(scope="module")
def runs():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, str(PROBE)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


@pytest.mark.parametrize("part", ["blocks", "tensors", "errors", "types", "kernel"])
def test_the_fast_interpreter_builds_refuses_and_computes_as_the_stock_one(runs, part):
    assert runs["patched"][part] == runs["stock"][part]
    assert runs["again"][part] == runs["stock"][part]  # the remembered shapes


def test_the_probe_reaches_each_refusal_and_the_wrap(runs):
    # the comparison above is only worth something if the stock run refused each bad shape and the int32
    # arithmetic wrapped (an overflow check that raised would show as a failed probe, not as equal results)
    assert all(e != "no error" for e in runs["stock"]["errors"]), runs["stock"]["errors"]
    assert min(runs["stock"]["kernel"][0]) < 0


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.float16, np.uint16, np.float32, np.int64, np.uint64])
def test_a_gathered_load_reads_the_bits_tritons_load_reads(dtype):
    """fastpatch.gather against Triton's own C++ load: every width, masks, `other`, broadcast operands, NaN bit
    patterns (copied, never converted) and addresses anywhere in a buffer, in any order and repeated."""
    from triton._C.libtriton import interpreter as cpp

    from autotune.verify.interp.fastpatch import gather

    rng = np.random.default_rng(7)
    raw = rng.integers(0, 256, size=4096 * 8, dtype=np.uint8)  # every bit pattern, NaNs included
    memory = raw.view(dtype) if dtype is not np.bool_ else (raw % 2).astype(np.bool_)
    base = memory.__array_interface__["data"][0]
    width = np.dtype(dtype).itemsize
    for shape in [(1,), (16, 64), (128, 64)]:
        index = rng.integers(0, memory.size, size=shape)
        ptrs = (base + index * width).astype(np.uint64)
        for mask in [np.ones(shape, bool), rng.random(shape) < 0.5, np.zeros(shape, bool),
                     np.broadcast_to(rng.random(shape[-1:]) < 0.5, shape)]:
            for other in [None, np.full(shape, memory[3], dtype), np.broadcast_to(memory[5:6], shape)]:
                stock = cpp.load(ptrs, mask, np.zeros(shape, dtype) if other is None else other, np.dtype(dtype))
                ours = gather(ptrs, mask, other, np.dtype(dtype))
                assert ours is not None and ours.dtype == stock.dtype and ours.shape == stock.shape
                assert ours.view(np.uint8).tobytes() == stock.view(np.uint8).tobytes()
    if width > 1:  # an address inside an element: the C++ load reads it (gather does not)
        ptrs = np.array([base, base + 1], dtype=np.uint64)
        assert gather(ptrs, np.ones(2, bool), None, np.dtype(dtype)) is None
