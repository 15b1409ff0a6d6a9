"""The one place the checker patches Triton's CPU interpreter, in one declared order.

Several patches wrap the same builder methods (set_grid_dim/idx, masked loads and stores, atomics); a later wrap
runs outside an earlier one, so the order below is part of the semantics: the program order is drawn before
the race detector and the sample see a launch, and the sample's grid loop (outermost) picks which programs run.
Called once by the device's worker (autotune.verify.worker) while the interpreter's modules can still be patched,
before the candidate is imported; a second call does nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from autotune.verify.interp import (
    bf16,
    bounds,
    contract,
    fastpatch,
    interleave,
    launch,
    libdevice,
    numerics,
    races,
    sampling,
)

PATCHES: tuple[tuple[str, Callable[[], None]], ...] = (
    ("a launch's programs run as coroutines (its loop, under every other patch)", interleave.install_executor),
    ("the interpreter's own overheads taken out (language patching once per launch, frontend shapes remembered, the "
     "overflow check its options drop not computed): cheaper, same result", fastpatch.install),
    ("a hook before each launch; the launch being run", launch.install_launch_hooks),
    ("programs in a random order per launch", launch.permute_programs),
    ("fp32 -> bf16 rounded to nearest even", numerics.round_bf16_like_gpu),
    ("bf16 arithmetic on values, each result rounded once", bf16.install),
    ("a multiply feeding an add fused into one rounding, or not, as the case drew (fp contraction)",
     contract.install),
    ("tl.dot as the tensor cores compute it", numerics.install_dot),
    ("the vetted libdevice functions computed on the interpreter", libdevice.install),
    ("casts as PTX cvt", numerics.install_casts),
    ("a comparison typed i1, as a GPU types it", numerics.install_boolean_comparisons),
    ("integer division by zero as sm_90's code gives it", numerics.install_integer_division),
    ("atomic exchange of floats, by their bits", numerics.install_float_exchange),
    ("scalar arguments typed as the JIT types them", numerics.install_scalar_arguments),
    ("tl.range counters as typed scalars", numerics.install_loop_counters),
    ("programs of one launch touching one address (races)", races.install),
    ("every access inside the launch's tensor arguments", bounds.install),
    ("a sample of a launch's programs, and what they wrote", sampling.install),
    ("each atomic a point where another program may run first (over every patch of the atomics)",
     interleave.install_switches),
)

_done: list[str] = []


def install() -> None:
    """Apply every patch in PATCHES, in order, once per process."""
    if _done:
        return
    for name, patch in PATCHES:
        patch()
        _done.append(name)


def installed() -> tuple[str, ...]:
    return tuple(_done)
