"""The static scan: every rule fires with a message that says what to do, and clean kernels pass."""

from pathlib import Path

import pytest

from autotune.targets import get
from autotune.verify.policy import parse, runtime_violations, scan

CANDIDATES = Path(__file__).parent / "candidates"
RMS = get("rms_norm")

KERNEL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def rms_norm(x, weight, eps):
    y = torch.empty_like(x)
    {body}
    _k[(1,)](x, y, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
    return y
'''


def findings(body: str = "pass", prefix: str = "") -> list[str]:
    return scan(parse(prefix + KERNEL.replace("{body}", body)), RMS)


@pytest.mark.parametrize("name", ["rms_norm_rowwise.py", "rms_norm_chunked.py", "pointer_cache.py", "no_mask.py"])
def test_clean_kernels_pass_the_scan(name):
    assert scan(parse((CANDIDATES / name).read_text()), RMS) == []


def test_silu_and_mul_candidate_passes_for_its_target():
    assert scan(parse((get("silu_and_mul").example_path).read_text()), get("silu_and_mul")) == []


@pytest.mark.parametrize("body, fragment", [
    ("z = torch.rsqrt(x)", "torch.rsqrt"),
    ("z = x.sum()", ".sum()"),
    ("z = x.float()", ".float()"),
    ("z = x.to(torch.float32)", ".to(...)"),
    ("z = x.item()", ".item()"),
    ("z = torch.ops.aten.mul(x, x)", "torch.ops"),
    ("z = open('/etc/passwd').read()", "`open`"),
    ("z = eval('1')", "`eval`"),
    ("z = getattr(torch, 'rs' + 'qrt')", "`getattr`"),
    ("z = __import__('os')", "`__import__`"),
    ("z = x.__class__.__subclasses__()", "__class__"),
    ("z = rms_norm.__globals__", "__globals__"),
    ("torch.testing.assert_close = print", "assigns to `torch.testing.assert_close`"),
    ("z = triton.runtime.driver", "triton.runtime"),
    ("z = torch.cuda.Stream()", "torch.cuda.Stream"),
])
def test_each_rule_fires_with_its_reason(body, fragment):
    found = findings(body)
    assert any(fragment in f for f in found), found
    assert all(f.startswith("line ") for f in found)


@pytest.mark.parametrize("module", ["os", "sys", "subprocess", "socket", "ctypes", "gc", "inspect", "importlib",
                                    "threading", "pathlib", "numpy", "torch.nn.functional"])
def test_imports_outside_the_allow_list_are_findings(module):
    found = findings(prefix=f"import {module}\n")
    assert any(f"imports `{module}`" in f for f in found), found


def test_allowed_launcher_code_is_not_flagged():
    body = ("n = x.shape[-1]; x2 = x.reshape(-1, n).contiguous(); s = x2.stride(0); d = x.dtype; "
            "w = weight.to(x.device); cache = {}; cache.get(x.data_ptr()); z = torch.zeros_like(x)")
    assert findings(body) == []


def test_a_parameter_may_shadow_a_banned_builtin_but_not_rebind_it():
    source = KERNEL.replace("def rms_norm(x, weight, eps):", "def rms_norm(input, weight, eps):\n    x = input")
    assert scan(parse(source), RMS) == []
    assert any("rebinds the builtin name `exec`" in f for f in findings("exec = print"))


def test_torch_inside_a_kernel_and_classes_are_findings():
    source = KERNEL.replace("    offs = tl.arange(0, BLOCK)", "    offs = tl.arange(0, BLOCK)\n    t = torch.float32")
    assert any("inside a Triton kernel" in f for f in scan(parse(source), RMS))
    assert any("defines class `Lazy`" in f for f in findings(prefix="class Lazy:\n    pass\n"))


def test_missing_kernel_and_missing_or_wrong_entry():
    no_kernel = "import torch\n\ndef rms_norm(x, weight, eps):\n    return torch.empty_like(x)\n"
    assert any("no @triton.jit kernel" in f for f in scan(parse(no_kernel), RMS))
    renamed = KERNEL.replace("def rms_norm(", "def my_norm(")
    assert any("no entry function" in f and "def rms_norm(" in f for f in scan(parse(renamed), RMS))
    short = KERNEL.replace("def rms_norm(x, weight, eps):", "def rms_norm(x):")
    assert any("takes 1 required arguments" in f for f in scan(parse(short), RMS))


def test_findings_come_in_line_order():
    found = findings("z = torch.rsqrt(x)", prefix="import os\n")
    assert found[0].startswith("line 1:") and "os" in found[0]


def test_syntax_errors_propagate_as_such():
    with pytest.raises(SyntaxError):
        parse("def rms_norm(x, weight, eps)\n    return x\n")


def test_runtime_rule_allows_allocation_and_views_only():
    ops = {"aten.empty_like": 2, "aten.view": 3, "aten.set_": 1, "aten.copy_": 2, "aten.mul": 4,
           "aten._to_copy (dtype conversion)": 1}
    assert runtime_violations(ops) == ["aten._to_copy (dtype conversion) x1", "aten.mul x4"]
