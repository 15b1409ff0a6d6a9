"""The device's kernel loader (autotune/verify/device/loader.py): the kernels and the constants they read, built from the
file's syntax tree without running the file."""

import textwrap

from autotune.verify.device.loader import load

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
    kernels = load(SOURCE, tmp_path / "kernels.py")
    for functions in (kernels.compiled, kernels.interpreted):
        seen = functions["kernel"].fn.__globals__
        assert {k: seen[k] for k in ("MAX_BLOCK", "LOW", "HIGH", "A", "B", "C")} == {
            "MAX_BLOCK": 4096, "LOW": 2, "HIGH": 2, "A": 3, "B": 4, "C": 5}
        assert seen["ROW_ALIGN"] == 1 and "NOT_A_CONSTANT" not in seen and "ALSO_NOT" not in seen
        assert "STARRED" not in seen and "FIRST" not in seen
