"""The static scan: every rule fires with a message that says what to do, and clean kernels pass."""

from pathlib import Path

import pytest

from autotune.targets import all_targets, get
from autotune.verify.static.policy import parse, runtime_violations, scan

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


# Correct kernels, Liger-Kernel and vLLM styles included, and the cheats and bugs that only later checks can
# catch (an unmasked load, a global float and a plain helper in a kernel: the compiler; an order-dependent grid:
# the permuted interpreter). A replayed cache (pointer_cache.py) was one: its module-level dict is refused now.
CLEAN = ["rms_norm_rowwise.py", "rms_norm_chunked.py", "rms_norm_autotuned.py", "rms_norm_liger_style.py",
         "rms_norm_vllm_style.py", "no_mask.py", "kernel_typo.py", "import_error.py",
         "global_float.py", "python_helper.py", "ordered_programs.py", "rms_norm_grid_function.py",
         "rms_norm_jit_by_assignment.py"]


@pytest.mark.parametrize("name", CLEAN)
def test_clean_kernels_pass_the_scan(name):
    assert scan(parse((CANDIDATES / name).read_text()), RMS) == []


STATE = [  # (code at the top level or in the launcher, what the finding names)
    ("CACHE = {}", "the module-level `CACHE` is a dict"),
    ("CALLS = []", "the module-level `CALLS` is a list"),
    ("SEEN = set()", "the module-level `SEEN` is a call of `set`"),
    ("BUF = torch.empty(16)", "the module-level `BUF` is a call of `torch.empty`"),
    ("T = (1, [2])", "the module-level `T` is a list"),
    ("L = [c for c in (1, 2)]", "the module-level `L` is a list comprehension"),
]


@pytest.mark.parametrize("code, fragment", STATE, ids=[s[0] for s in STATE])
def test_module_level_state_is_refused(code, fragment):
    assert any(fragment in f and "immutable constants" in f for f in findings(prefix=code + "\n")), findings(
        prefix=code + "\n")


@pytest.mark.parametrize("body, fragment", [
    ("COUNT.append(1)", "calls `.append()` on the module-level `COUNT`"),
    ("COUNT[0] = 1", "assigns into the module-level `COUNT`"),
])
def test_a_launcher_that_mutates_a_module_level_name_is_refused(body, fragment):
    assert any(fragment in f for f in findings(body, prefix="COUNT = (0,)\n"))


def test_constant_tables_and_configs_at_the_top_level_pass():
    prefix = ("BLOCK = tl.constexpr(2 ** 7)\nWIDTHS = ((128, 64), (4096, 1024))\nEPS = 1e-6 if True else 1e-5\n"
              "CONFIGS = tuple(triton.Config({'BLOCK': b}, num_warps=w) for b in (64, 128) for w in (4, 8))\n")
    assert not [f for f in findings(prefix=prefix) if "immutable" in f or "state" in f]


@pytest.mark.parametrize("target, path", [
    *[(t.name, t.example_path) for t in all_targets() if t.example_path is not None],
    ("rotary_embedding", CANDIDATES / "rotary_vllm_style.py"),
])
def test_correct_kernels_of_every_target_pass_the_scan(target, path):
    assert scan(parse(path.read_text()), get(target)) == []


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
    ("z = __name__", "`__name__`"),
    ("torch.testing.assert_close = print", "assigns to `torch.testing.assert_close`"),
    ("z = triton.runtime.driver", "triton.runtime"),
    ("z = torch.cuda.Stream()", "torch.cuda.Stream"),
    # module-valued attributes reached through an allowed module (issue 8: open and os through tl.core)
    ("z = tl.core.builtins.open", "triton.language.core.builtins.open"),
    ("z = tl.core.inspect.os", "triton.language.core.inspect.os"),
    ("z = triton.language.standard", "triton.language.standard"),
    # aliasing: every call the scan accepts must be one it saw
    ("f = torch.empty_like; z = f(x)", "takes `torch.empty_like` without calling it"),
    ("t = torch; z = t.empty_like(x)", "uses the module `torch` as a value"),
    ("f = x.view; z = f(-1)", "calls `f`, a value"),
    ("z = _k(x, y, 1, 1)", "other than launching it"),
    ("z = (lambda a: a)(x)", "calls `lambda a: a`"),
    # attributes of anything, the file's own tensors included
    ("y.data = x", "assigns to `y.data`"),
    ("x.grad = y", "assigns to `x.grad`"),
    ("z = x; z.shape = (1,)", "assigns to `z.shape`"),
    # introspection and string tricks that tell the interpreter from a GPU
    ("z = repr(_k)", "the builtin `repr`"),
    ("z = isinstance(_k, tuple)", "the builtin `isinstance`"),
    ("z = hasattr(_k, 'run')", "the builtin `hasattr`"),
    ("z = f'{_k}'", "formats a string outside an error message"),
    ("z = '%s' % (_k,)", "formats a string outside an error message"),
    ("z = type(x)", "the builtin `type`"),
    ("z = vars()", "the builtin `vars`"),
    ("z = x.handle", "`.handle`"),
])
def test_each_rule_fires_with_its_reason(body, fragment):
    found = findings(body)
    assert any(fragment in f for f in found), found
    assert all(f.startswith("line ") for f in found)


@pytest.mark.parametrize("module", ["os", "sys", "subprocess", "socket", "ctypes", "gc", "inspect", "importlib",
                                    "threading", "pathlib", "numpy", "torch.nn.functional", "collections", "functools",
                                    "triton.runtime", "triton.language.core", "triton.language.extra.cuda.libdevice",
                                    "triton.language.extra"])
def test_imports_outside_the_allow_list_are_findings(module):
    found = findings(prefix=f"import {module}\n")
    assert any(f"imports `{module}`" in f for f in found), found


@pytest.mark.parametrize("line, fragment", [
    ("from typing import sys", "imports `typing.sys`"),  # typing serves annotations (typing.Any ...) and no more
    ("import typing\nT = typing.get_type_hints", "uses `typing.get_type_hints`, which is not on the allow-list"),
    ("from typing import Any\nA = Any", "uses `typing.Any` other than in an annotation"),
    ("from collections import OrderedDict", "imports from `collections`"),
    ("from torch import ops", "imports `torch.ops`"),
    ("from triton import knobs", "imports `triton.knobs`"),
    ("from triton.language import core", "imports `triton.language.core`"),
    ("from triton import *", "imports `triton.*`"),
    ("from . import helpers", "imports from `.`"),
])
def test_from_imports_name_only_listed_members(line, fragment):
    found = findings(prefix=line + "\n")
    assert any(fragment in f for f in found), found


@pytest.mark.parametrize("prefix", ["from triton import language as tl\n", "from triton import cdiv, next_power_of_2\n",
                                    "from torch import empty_like\n", "import triton.language\n", "import math\n"])
def test_named_members_of_allowed_modules_may_be_imported(prefix):
    assert findings(prefix=prefix) == []


# Section 4 of issue 8: the same file must take the same path on the CPU interpreter and on a GPU.
@pytest.mark.parametrize("body, fragment", [
    ("if torch.cuda.is_available(): pass", "torch.cuda.is_available"),
    ("if x.is_cuda: pass", "`.is_cuda`"),
    ("if x.device.type == 'cuda': pass", "`.device`"),
    ("if x.device == 'cpu': pass", "`.device`"),
    ("d = dict(device=x.device)", "`.device`"),
    ("z = x.get_device()", "`.get_device()`"),
    ("z = triton.knobs.runtime.interpret", "triton.knobs"),
    ("z = torch.cuda.get_device_capability()", "torch.cuda.get_device_capability"),
    ("z = triton.runtime.driver.active.get_current_target()", "triton.runtime"),
])
def test_a_candidate_cannot_ask_where_it_runs(body, fragment):
    found = findings(body)
    assert any(fragment in f for f in found), found


def test_the_device_may_be_passed_on_to_an_allocation():
    assert findings("z = torch.empty(4, device=x.device); w2 = weight.to(x.device); n = x.new_empty(2, device=x.device)") == []


@pytest.mark.parametrize("body, fragment", [
    ("try:\n        pass\n    except Exception:\n        pass", "`try` statement"),
    ("global _cache", "declares a global"),
    ("class Inner:\n        pass", "defines `Inner` inside a function"),  # a plain nested def is a grid function
    ("import math", "`import` statement"),
])
def test_statements_a_launcher_does_not_need(body, fragment):
    found = findings(body)
    assert any(fragment in f for f in found), found


@pytest.mark.parametrize("line, fragment", [
    ("    h = x_ptr.handle", "`.handle` in a kernel"),  # the interpreter's numpy array
    ("    tl.inline_asm_elementwise('mov', '=r,r', [offs], dtype=tl.int32, is_pure=True, pack=1)",
     "triton.language.inline_asm_elementwise"),
    ("    tl.extra.cuda.globaltimer()", "triton.language.extra.cuda.globaltimer"),
    ("    tl.device_print('x', offs)", "triton.language.device_print"),
    ("    print(offs)", "the builtin `print`"),
    ("    t = torch.float32", "inside a Triton kernel"),
    ("    z = tl.math.core", "triton.language.math.core"),
    # a dtype made by name, past the listed ones (an attacker's fp8 cast that the interpreter computed otherwise)
    ("    z = tl.full((BLOCK,), 1000.0, tl.float32).to(tl.dtype('fp8e4nv'))", "`triton.language.dtype` other than"),
    ("    p = x_ptr.to(tl.pointer_type(tl.int8))", "`triton.language.pointer_type` other than"),
])
def test_kernels_use_only_listed_language_members(line, fragment):
    source = KERNEL.replace("    offs = tl.arange(0, BLOCK)\n", f"    offs = tl.arange(0, BLOCK)\n{line}\n")
    found = scan(parse(source), RMS)
    assert any(fragment in f for f in found), found


LIBDEVICE_KERNEL = KERNEL.replace("tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)",
                                  "tl.store(y_ptr + offs, {call}, mask=offs < n)")


@pytest.mark.parametrize("prefix, call", [
    ("from triton.language.extra.libdevice import rsqrt, round as rnd\n",
     "rnd(rsqrt(tl.load(x_ptr + offs, mask=offs < n)))"),
    ("from triton.language.extra import libdevice\n", "libdevice.pow(tl.load(x_ptr + offs, mask=offs < n), 2.0)"),
    ("import triton.language.extra.libdevice as ld\n", "ld.tanh(tl.load(x_ptr + offs, mask=offs < n))"),
])
def test_vetted_libdevice_functions_may_be_called_in_kernels(prefix, call):
    assert scan(parse(prefix + LIBDEVICE_KERNEL.replace("{call}", call)), RMS) == []


@pytest.mark.parametrize("prefix, call, body, fragment", [
    ("from triton.language.extra import libdevice\n", "libdevice.clz(offs)", "pass",
     "triton.language.extra.libdevice.clz"),  # not vetted: not run by the interpreter as on the GPU
    ("from triton.language.extra.libdevice import popc\n", "offs", "pass", "imports `triton.language.extra.libdevice.popc`"),
    ("from triton.language.extra.libdevice import rsqrt\n", "offs", "z = rsqrt(x)", "`triton.language.extra.libdevice.rsqrt`"),
    ("from triton.language.extra.cuda import libdevice\n", "offs", "pass", "imports from `triton.language.extra.cuda`"),
])
def test_libdevice_is_for_kernels_and_only_its_vetted_functions(prefix, call, body, fragment):
    found = scan(parse(prefix + LIBDEVICE_KERNEL.replace("{call}", call).replace("{body}", body)), RMS)
    assert any(fragment in f for f in found), found


def test_the_vetted_libdevice_names_are_the_ones_the_interpreter_runs():
    from autotune.verify.interp.libdevice import VETTED
    from autotune.verify.static.allowlist import KERNEL_LIBDEVICE

    assert set(KERNEL_LIBDEVICE) == set(VETTED)


def test_a_language_name_triton_does_not_have_is_left_to_the_compiler():
    source = KERNEL.replace("tl.load(", "tl.lod(")
    assert scan(parse(source), RMS) == []  # tl.lod: compile_error from the compiler, with Triton's own message


def test_decorators_other_than_triton_are_findings():
    found = findings(prefix="import math\n\n\n@math.ceil\ndef f():\n    pass\n")
    assert any("decorator `math.ceil`" in f for f in found), found


def test_allowed_launcher_code_is_not_flagged():
    body = ("n = x.shape[-1]; x2 = x.reshape(-1, n).contiguous(); s = x2.stride(0); d = x.dtype; "
            "w = weight.to(x.device); cache = {}; cache.get(x.data_ptr()); z = torch.zeros_like(x)")
    assert findings(body) == []


def test_a_parameter_may_shadow_a_banned_builtin_but_not_rebind_it():
    source = KERNEL.replace("def rms_norm(x, weight, eps):", "def rms_norm(input, weight, eps):\n    x = input")
    assert scan(parse(source), RMS) == []
    assert any("rebinds the builtin name `exec`" in f for f in findings("exec = len"))
    assert any("rebinds the imported name `torch`" in f for f in findings("torch = x"))


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


def test_every_allow_list_entry_exists_and_has_a_reason():
    import importlib
    import types

    from autotune.verify.static import allowlist

    for dotted, (use, reason) in allowlist.NAMES.items():
        module, _, name = dotted.rpartition(".")
        if module:
            assert hasattr(importlib.import_module(module), name), dotted
        assert reason and (use is allowlist.Use.MODULE) == isinstance(_resolve(dotted), types.ModuleType), dotted
    tl = importlib.import_module("triton.language")
    for name, (use, reason) in allowlist.KERNEL_TL.items():
        assert hasattr(tl, name) and reason, name
        assert isinstance(getattr(tl, name), types.ModuleType) == (use is allowlist.Use.MODULE), name
    for name in allowlist.KERNEL_MATH:
        assert callable(getattr(tl.math, name)), name
    for table in (allowlist.BUILTINS, allowlist.METHODS, allowlist.ATTRIBUTES, allowlist.KERNEL_ATTRIBUTES):
        assert all(reason for _, reason in table.values())


def _resolve(dotted):
    import importlib

    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for p in parts[1:]:
        obj = getattr(obj, p)
    return obj


# Issue 17: a name only read inside a top-level assignment target (a subscript's key) was counted as the file's own
# global, so `exec`, `eval`, `getattr` and `open` passed the scan. Each shape below once bound or hid a builtin.
HOLES = [
    ("_d = {}\n_d[exec] = 1\n", "z = exec('1')", "exec"),
    ("_d = {}\n_d[eval] = 1\n", "z = eval('1')", "eval"),
    ("_d = {}\n_d[getattr] = 1\n", "z = getattr(x, 'sum')()", "getattr"),
    ("_d = {}\n_d[open] = 1\n", "z = open('/etc/passwd')", "open"),
    ("_d = {}\n_d[__import__] = 1\n", "z = __import__('os')", "__import__"),
    ("_d = {}\n_d[compile] = 1\n", "z = compile('1', 'f', 'eval')", "compile"),
    ("_d = {}\n_d[globals] = 1\n", "z = globals()", "globals"),
    ("_d = {}\n_d[exec].k = 1\n", "z = exec('1')", "exec"),  # an attribute's base
    ("_d = {}\n_d[0], *_e[open] = 1, 2\n", "z = open('/etc/passwd')", "open"),  # starred, tuple unpacking
    ("_d = {}\n_d[getattr]: int = 1\n", "z = getattr(x, 'sum')()", "getattr"),  # annotated
    ("_d = {}\n_d[eval] += 1\n", "z = eval('1')", "eval"),  # augmented
    ("_d = {}\ndel _d[exec]\n", "z = exec('1')", "exec"),
    ("for exec in ():\n    pass\n", "z = exec('1')", "exec"),
    ("_v = [0 for exec in ()]\n", "z = exec('1')", "exec"),  # a comprehension's variable is its own
    ("_v = (_w := open)\n", "z = _w('/etc/passwd')", "open"),  # walrus
    ("_v = (lambda e=eval: 0)\n", "pass", "eval"),  # a lambda's default, evaluated where it is written
    ("", "_v = [0 for open in ()]\n    z = max(['/etc/passwd'], key=open)", "open"),  # a comprehension in a function
    ("", "z = max(['1'], key=lambda s, e=eval: max([s], key=e))", "eval"),
    ("", "d = {}\n    d[exec] = 1\n    z = exec('1')", "exec"),
]


@pytest.mark.parametrize("prefix, body, name", HOLES, ids=[f"{i}-{h[2]}" for i, h in enumerate(HOLES)])
def test_a_builtin_read_in_an_assignment_target_is_a_use_not_a_global(prefix, body, name):
    found = findings(body, prefix=prefix)
    assert any(f"`{name}`" in f for f in found), found


@pytest.mark.parametrize("prefix, fragment", [
    ("from torch import empty as open\n", "rebinds the builtin name `open`"),
    ("def open(path):\n    return path\n", "rebinds the builtin name `open`"),
    ("import math as torch\n", "rebinds the top-level name `torch`"),
    ("def tl():\n    return 0\n", "rebinds the top-level name `tl`"),
    ("def f(x: max([1], key=len)):\n    return x\n", "in an annotation"),
])
def test_top_level_names_mean_one_thing(prefix, fragment):
    source = KERNEL.replace("{body}", "pass")
    head, tail = source.split("\n\n\n@triton.jit", 1)
    found = scan(parse(head + "\n" + prefix + "\n\n@triton.jit" + tail), RMS)
    assert any(fragment in f for f in found), found


def test_the_same_module_imported_twice_is_one_name():
    assert findings(prefix="import triton\nimport triton.language\nfrom triton import language as tl\n") == []


def test_the_attackers_exec_hole_is_refused_by_the_scan():
    found = scan(parse((CANDIDATES / "exec_hole.py").read_text()), RMS)
    assert any("the builtin `exec`" in f for f in found), found


def test_a_kernel_may_ask_its_dtype_what_it_is_but_not_name_an_fp8_type():
    """Issue 27, section 5: vLLM's attention kernels branch on `K.dtype.is_fp8()` (constexpr facts of the type)."""
    asks = KERNEL.replace("    offs = tl.arange(0, BLOCK)\n",
                          "    offs = tl.arange(0, BLOCK)\n    FP8: tl.constexpr = x_ptr.dtype.element_ty.is_fp8()\n")
    assert "is_fp8()" in asks and scan(parse(asks.replace("{body}", "pass")), RMS) == []
    names = KERNEL.replace("    offs = tl.arange(0, BLOCK)\n",
                           "    offs = tl.arange(0, BLOCK)\n    FP8: tl.constexpr = x_ptr.dtype.element_ty == tl.float8e4nv\n")
    assert any("float8e4nv" in f for f in scan(parse(names.replace("{body}", "pass")), RMS))


def test_a_nested_function_is_launcher_code_and_nothing_more():
    """Issue 27, section 5: a grid function of META inside the launcher is allowed, scanned as launcher code; a
    decorated one, or one inside a kernel, is not."""
    assert findings("def grid(META):\n        return (triton.cdiv(x.numel(), META['BLOCK']),)") == []
    assert any("open" in f for f in findings("def grid(META):\n        open('/etc/passwd')\n        return (1,)"))
    assert any("inside a function with a decorator" in f
               for f in findings("@triton.jit\n    def inner(a):\n        pass"))
    kernel_def = KERNEL.replace("    offs = tl.arange(0, BLOCK)\n", "    def helper(a):\n        return a\n"
                                "    offs = tl.arange(0, BLOCK)\n")
    assert any("inside a kernel" in f for f in scan(parse(kernel_def.replace("{body}", "pass")), RMS))


def test_a_kernel_made_by_assignment_has_its_decorators_vetted_as_on_a_def():
    """`_k = triton.jit(_body)` is `@triton.jit def _body`; a wrapper that is not an allowed decorator is refused as
    it would be on the def, and the plain function is then launcher code (its tl calls refused)."""
    source = (CANDIDATES / "rms_norm_jit_by_assignment.py").read_text()
    assert scan(parse(source), RMS) == []
    wrapped = source.replace("_k = triton.heuristics(", "_k = print(triton.heuristics(").replace(
        "(triton.jit(_body))", "(triton.jit(_body)))")
    assert any("decorator `print`" in f for f in scan(parse(wrapped), RMS))



HOOKED = '''
from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl


def _metadata(grid: Callable[..., Any], kernel: Any, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": f"{kernel.name} [n={args['n']}]", "bytes": 2 * args["n"] * args["x_ptr"].element_size()}


@triton.jit(launch_metadata=_metadata)
def _k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def rms_norm(x, weight, eps):
    y = torch.empty_like(x)
    _k[(1,)](x, y, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
    {use}
    return y
'''


def test_a_launch_metadata_hook_may_label_its_launch_for_the_profiler():
    """vLLM's persistent GEMM names its FLOPs and bytes through `@triton.jit(launch_metadata=...)`: Triton calls the
    hook only while a launch hook is installed (never in the checker; a candidate cannot install one), so it may
    format strings and read the kernel's name; read anywhere else, it is plain launcher code again."""
    assert scan(parse(HOOKED.replace("{use}", "pass")), RMS) == []
    called = scan(parse(HOOKED.replace("{use}", "label = _metadata(None, _k, {})")), RMS)
    assert any("formats a string outside an error message" in f for f in called), called
    assert any("`.name` outside a kernel" in f for f in called), called
    assert any("`.name` outside a kernel" in f for f in findings("k = _k.name"))  # only a hook reads it


# An attacker of stop 40 zeroed the key cache from a hook (`args["k_ptr"].zero_()`): it would run only under a
# profiler, where nothing checks it. A hook only reads and builds its own dict.
HOOK_EFFECTS = [
    ('args["x_ptr"].zero_()', "calls `.zero_()` in the launch_metadata hook"),
    ('args["x_ptr"][0] = 1.0', "stores into `args['x_ptr']` in the launch_metadata hook"),
    ('x = args["x_ptr"]\n    x += 1', "changes a value in place in the launch_metadata hook"),
    ('_k[(1,)](args["x_ptr"], args["x_ptr"], 1, BLOCK=1)', "calls `_k[1,]` in the launch_metadata hook"),
    ('torch.empty_like(args["x_ptr"])', "calls `torch.empty_like` in the launch_metadata hook"),
    ('rms_norm(args["x_ptr"], None, 1.0)', "calls `rms_norm` in the launch_metadata hook"),
]


@pytest.mark.parametrize("effect, fragment", HOOK_EFFECTS,
                         ids=["method", "store", "in_place", "launch", "torch", "own_function"])
def test_a_launch_metadata_hook_may_not_change_anything(effect, fragment):
    source = HOOKED.replace("{use}", "pass").replace("    return {\"name\"", f"    {effect}\n    return {{\"name\"", 1)
    assert effect in source
    found = scan(parse(source), RMS)
    assert any(fragment in f for f in found), found
