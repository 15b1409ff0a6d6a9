"""The device's kernel loader (autotune/verify/device/loader.py): the kernels and the constants they read, built from the
file's syntax tree without running the file."""

import textwrap
import time

import pytest

from autotune.config import compose
from autotune.verify.device.loader import KernelSourceError, load
from autotune.verify.static import policy
from autotune.verify.static.size import SourceLimits

BOUNDS = SourceLimits.from_config(compose([]).verify)

SOURCE = textwrap.dedent("""
    import triton
    import triton.language as tl

    MAX_BLOCK, ROW_ALIGN = 4096, tl.constexpr(1)
    LOW = HIGH = 2
    (A, B), C = (3, 4), 5
    NOT_A_CONSTANT, ALSO_NOT = divmod(7, 2)
    STARRED = 6
    FIRST, *STARRED = 1, 2


    @triton.jit
    def kernel(x_ptr, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), ROW_ALIGN + MAX_BLOCK + LOW + HIGH + A + B + C)
""")


def test_every_name_an_assignment_stores_a_constant_in_is_bound_and_no_other(tmp_path):
    kernels = load(SOURCE, tmp_path / "kernels.py", BOUNDS)
    for functions in (kernels.compiled, kernels.interpreted):
        seen = functions["kernel"].fn.__globals__
        assert {k: seen[k] for k in ("MAX_BLOCK", "LOW", "HIGH", "A", "B", "C")} == {
            "MAX_BLOCK": 4096, "LOW": 2, "HIGH": 2, "A": 3, "B": 4, "C": 5}
        assert seen["ROW_ALIGN"] == 1 and "NOT_A_CONSTANT" not in seen and "ALSO_NOT" not in seen
        assert "STARRED" not in seen and "FIRST" not in seen


KERNEL = textwrap.dedent("""
    import triton
    import triton.language as tl
    {top}

    @triton.jit
    def kernel(x_ptr, {params}BLOCK: tl.constexpr = 64):
        tl.store(x_ptr + tl.arange(0, BLOCK), {value})
""")


def kernel(top: str = "", params: str = "", value: str = "1.0") -> str:
    return KERNEL.format(top=top, params=params, value=value)


@pytest.mark.parametrize("params", [
    "Z=tuple(range(40_000_000)), ",  # a default that runs Python (4 GB) when the function is defined
    "Z: tuple(range(40_000_000)) = 1, ",  # an annotation, evaluated there too
    "Z=10 ** 64 ** 64, ",
])
def test_a_parameter_default_or_annotation_that_is_not_a_constant_is_refused_unevaluated(tmp_path, params):
    started = time.monotonic()
    with pytest.raises(KernelSourceError, match="is not a|in an annotation"):
        load(kernel(params=params), tmp_path / "kernels.py", BOUNDS)
    assert time.monotonic() - started < 5  # refused from the syntax tree: 40M items would take far longer


def test_constant_defaults_and_annotations_are_kept(tmp_path):
    kernels = load(kernel(top="SCALE = 2 ** 10", params="eps: float = 1e-6, n: 'tl.constexpr' = SCALE, "),
                   tmp_path / "kernels.py", BOUNDS)
    fn = kernels.interpreted["kernel"].fn
    assert fn.__defaults__ == (1e-6, 1024, 64)
    assert fn.__annotations__["n"] == "tl.constexpr" and fn.__annotations__["eps"] is float
    assert kernels.constexpr_args["kernel"] == ("n", "BLOCK")


def test_an_optional_annotation_is_kept_as_its_text_and_its_type_is_checked(tmp_path):
    """vLLM's unified attention annotates its optional scale strides `int | None = None`."""
    kernels = load(kernel(params="stride: int | None = None, "), tmp_path / "kernels.py", BOUNDS)
    assert kernels.interpreted["kernel"].fn.__annotations__["stride"] == "int | None"
    with pytest.raises(KernelSourceError, match="thing"):  # refused like any name outside the allow-list
        load(kernel(params="stride: secret.thing | None = None, "), tmp_path / "other.py", BOUNDS)


@pytest.mark.parametrize("keyword, kept", [("do_not_specialize=['eps']", ["eps"]),  # FlagGems writes a list
                                           ("do_not_specialize=('eps',)", ("eps",))])
def test_jit_keywords_may_be_lists_or_tuples_of_constants(tmp_path, keyword, kept):
    source = kernel(params="eps, ").replace("@triton.jit", f"@triton.jit({keyword})")
    kernels = load(source, tmp_path / "kernels.py", BOUNDS)
    assert kernels.compiled["kernel"].do_not_specialize == kept or list(kernels.compiled["kernel"].do_not_specialize) \
        == [1]  # Triton keeps the names or turns them into positions


def test_a_jit_keyword_list_that_is_not_constants_is_refused(tmp_path):
    source = kernel(top="WHICH = divmod(7, 2)", params="eps, ").replace(
        "@triton.jit", "@triton.jit(do_not_specialize=[WHICH])")  # a name bound to no constant
    with pytest.raises(KernelSourceError, match="do_not_specialize"):
        load(source, tmp_path / "kernels.py", BOUNDS)


@pytest.mark.parametrize("top", [
    "A = 10 ** 64\nB = A ** 64\nC = B ** 64\nD = C ** 64",  # each step under a per-operation cap, together not
    "A = 1 << 100_000",
    "A = 'x' * 10 ** 8",
    "A = (0,) * 10 ** 8",
    "A = '%0999999999d' % 1",
    "A = tl.constexpr('a') * 400_000_000",  # tl.constexpr's operators are the plain values', bounded as those
    "A = tl.constexpr('%0400000000d') % 1",
    "A = tl.constexpr(3) ** 10 ** 9",
])
def test_a_constant_past_the_bounds_is_not_computed_and_stays_unbound(tmp_path, top):
    last = top.splitlines()[-1].split(" = ")[0]
    started = time.monotonic()
    kernels = load(kernel(top=top, value=f"{last} + 1.0"), tmp_path / "kernels.py", BOUNDS)
    assert last not in kernels.interpreted["kernel"].fn.__globals__
    assert time.monotonic() - started < 5


def test_a_refused_name_bound_by_an_import_is_refused_by_the_device_alone(tmp_path):
    source = kernel(top="from triton.language import device_print as DP", value="1.0)\n    DP('x', BLOCK")
    assert policy.kernel_findings(policy.parse(source)), "the device's own scan must see the import"
    with pytest.raises(KernelSourceError, match="device_print"):
        load(source, tmp_path / "kernels.py", BOUNDS)


def test_the_file_bounds_hold_in_the_device_too(tmp_path):
    with pytest.raises(KernelSourceError, match="verify.max_source_kb"):
        load(kernel(top="# " + "x" * (BOUNDS.max_bytes + 1)), tmp_path / "kernels.py", BOUNDS)
    with pytest.raises(KernelSourceError, match="verify.max_tree_depth"):
        load(kernel(top="A = " + "-" * 80 + "1"), tmp_path / "kernels.py", BOUNDS)


def test_a_launch_metadata_hook_stays_on_the_host(tmp_path):
    """The device never runs the file's Python: `launch_metadata=` names a plain function, which the device's kernel
    goes without (no hook is installed to call it), and nothing of it is evaluated."""
    source = kernel(top="def _label(grid, kernel, args):\n    return open('/etc/passwd')\n").replace(
        "@triton.jit", "@triton.jit(launch_metadata=_label)")
    kernels = load(source, tmp_path / "kernels.py", BOUNDS)
    assert kernels.compiled["kernel"].launch_metadata is None
    assert "_label" not in kernels.compiled["kernel"].fn.__globals__
