"""A candidate's kernels built from its source without running the file: what the device process executes.

The device process (autotune.verify.device.process) holds the real case data and runs the candidate's kernels under
the interpreter, so it must never run the candidate's Python: no module-level statement, no launcher, no
decorator argument. It builds the kernels from the syntax tree instead:

- the imports of the allowed modules (torch, triton, triton.language, math, the vetted libdevice) bind their names;
- a top-level assignment binds its name only when its value is a constant expression this module can
  evaluate itself (numbers, strings, tuples, `tl.constexpr(...)`, dtypes, arithmetic on those); anything
  else is left unbound, and a kernel that reads it fails to compile, as it would if the file were wrong;
- each top-level function whose innermost decorator is `@triton.jit` is compiled alone, with its decorators
  removed, into a namespace that holds only the above and the other kernels; `@triton.autotune` and
  `@triton.heuristics` are the host's business (it sends the final meta-parameters with every launch). Its
  parameter defaults, its annotations and `@triton.jit(...)`'s keywords are constant expressions or names of the
  allowed modules, set on the function after it is defined: a default such as `Z=tuple(range(10**8))` is refused,
  never evaluated;
- a constant is bounded as it is computed (`ConstantLimits`: the bits of an integer, the items of a string or
  tuple), before any operation that would pass the bound runs: `A = 10 ** 64; B = A ** 64; ...` stops at the
  first name over it, which is left unbound.

Before anything is compiled, every kernel body is checked against the kernel half of the allow-list
(autotune.verify.static.policy.kernel_findings): Triton's front end calls Python callables it reaches through a
module at compile time, so a kernel that reached `tl.core.builtins.open` would run it here. The names a
kernel may reach are the allow-listed ones, whatever the judge's own scan said.

    kernels = load(source, workdir / "kernels.py", SourceLimits.from_config(cfg.verify))  # or KernelSourceError
    kernels.interpreted["_rms_norm_kernel"]             # InterpretedFunction (TRITON_INTERPRET=1)
    kernels.compiled["_rms_norm_kernel"]                 # JITFunction, for Triton's front end
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import math
import operator
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

from autotune.verify.static import policy, size

_MODULES = {"torch": torch, "triton": triton, "triton.language": tl, "math": math,
            "triton.language.extra.libdevice": libdevice}  # its vetted functions as interp.libdevice installed them
# What a kernel body may name beyond its file's own constants and kernels (Triton's front end has its own
# namespace for these; the interpreter runs the body as Python and needs them as builtins).
_KERNEL_BUILTINS = {name: getattr(builtins, name) for name in
                    ("range", "len", "min", "max", "int", "float", "bool", "abs", "isinstance", "getattr",
                     "hasattr", "list", "tuple", "print", "ValueError", "AssertionError", "TypeError")}
_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow, ast.LShift: operator.lshift,
    ast.RShift: operator.rshift, ast.BitOr: operator.or_, ast.BitAnd: operator.and_, ast.BitXor: operator.xor}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_,
                                            ast.Invert: operator.invert}
_CONSTANT_TYPES = (int, float, bool, str, type(None), tl.constexpr, tl.dtype, torch.dtype)


class KernelSourceError(Exception):
    """The source cannot be turned into kernels (a refused name in a kernel body, a parameter default that is
    not a constant, no kernel at all)."""


@dataclasses.dataclass(frozen=True)
class ConstantLimits:
    """The largest constant the loader computes: an integer's bits, a string's or a tuple's items
    (verify.max_constant_bits, verify.max_constant_items)."""

    bits: int
    items: int

    def check(self, value: Any) -> Any:
        """`value` when within the bounds, else _NotConstant."""
        inner = value.value if isinstance(value, tl.constexpr) else value
        if isinstance(inner, int) and inner.bit_length() > self.bits or (
                isinstance(inner, (str, tuple)) and len(inner) > self.items):
            raise _NotConstant
        return value

    def before(self, op: type, left: Any, right: Any) -> None:
        """_NotConstant if `left op right` would pass the bounds, worked out from the operands' sizes alone."""
        ints = isinstance(left, int) and isinstance(right, int)
        if op is ast.Pow and ints and (right < 0 or (abs(left) > 1 and right * left.bit_length() > self.bits)):
            raise _NotConstant
        if op is ast.LShift and ints and right > self.bits:
            raise _NotConstant
        if op is ast.Mult and isinstance(left, (str, tuple)) != isinstance(right, (str, tuple)):
            times, seq = (right, left) if isinstance(left, (str, tuple)) else (left, right)
            if isinstance(times, int) and times * len(seq) > self.items:
                raise _NotConstant
        if op is ast.Mod and isinstance(left, str):  # "%0999999999d" % 1: a format's width is unbounded
            raise _NotConstant


@dataclasses.dataclass
class Kernels:
    interpreted: dict[str, InterpretedFunction]  # run under TRITON_INTERPRET=1
    compiled: dict[str, JITFunction]  # the same functions for Triton's front end (autotune.verify.device.frontend)
    constexpr_args: dict[str, tuple[str, ...]]  # kernel -> its tl.constexpr parameters


def load(source: str, path: Path, bounds: size.SourceLimits) -> Kernels:
    """The kernels of `source`, compiled from its syntax tree (the file is written to `path`, which the
    interpreter and Triton's front end read their source lines from). The file's bounds are checked here too,
    whatever the judge checked."""
    problem = size.source_problem(source, bounds)
    if problem:
        raise KernelSourceError(problem)
    tree = policy.parse(source, filename=str(path))
    problem = size.tree_problem(tree, bounds)
    if problem:
        raise KernelSourceError(problem)
    limits = ConstantLimits(bounds.max_constant_bits, bounds.max_constant_items)
    refused = policy.kernel_findings(tree)
    if refused:
        raise KernelSourceError(refused[0])
    path.write_text(source)
    compiled = _namespace(tree, path, interpreted=False, limits=limits)
    interpreted = _namespace(tree, path, interpreted=True, limits=limits)
    names = [n for n in compiled if isinstance(compiled[n], JITFunction)]
    if not names:
        raise KernelSourceError("no @triton.jit kernel in the file")
    return Kernels(interpreted={n: interpreted[n] for n in names}, compiled={n: compiled[n] for n in names},
                   constexpr_args={n: _constexpr_params(compiled[n]) for n in names})


def _namespace(tree: ast.Module, path: Path, interpreted: bool, limits: ConstantLimits) -> dict:
    """The module namespace the kernels see: imports, constants, the kernels themselves (as JITFunctions or
    as InterpretedFunctions: a kernel calls its helpers by their global names)."""
    ns: dict = {"__builtins__": dict(_KERNEL_BUILTINS), "__name__": "candidate_kernels", _LIMITS: limits}
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            _bind_import(stmt, ns)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                for name, value in _bound(target, stmt.value):
                    try:
                        ns[name] = constant(value, ns)
                    except _NotConstant:  # stored, but not a constant: the kernels may not read it
                        ns.pop(name, None)
        elif isinstance(stmt, ast.FunctionDef) and _is_kernel(stmt, ns):
            ns[stmt.name] = _kernel(stmt, path, ns, interpreted)
    return ns


def _bound(target: ast.AST, value: ast.AST | None) -> list[tuple[str, ast.AST | None]]:
    """(name, value expression) for each name an assignment stores: `A = 1`, `A = B = 1`, `A, B = 1, 2`; a name
    stored otherwise (`A, B = f()`, `A, *B = 1, 2`) with None, which is no constant."""
    if isinstance(target, ast.Name):
        return [(target.id, value)]
    if isinstance(target, (ast.Tuple, ast.List)):
        if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts) and not any(
                isinstance(t, ast.Starred) for t in target.elts):
            return [pair for t, v in zip(target.elts, value.elts) for pair in _bound(t, v)]
        return [(n.id, None) for n in ast.walk(target) if isinstance(n, ast.Name)]
    return []


def _bind_import(stmt: ast.Import | ast.ImportFrom, ns: dict) -> None:
    if isinstance(stmt, ast.Import):
        for a in stmt.names:
            if a.name in _MODULES:
                ns[a.asname or a.name.split(".")[0]] = _MODULES[a.name if a.asname else a.name.split(".")[0]]
        return
    for a in stmt.names if not stmt.level else ():  # from triton.language.extra import libdevice
        if f"{stmt.module}.{a.name}" in _MODULES:
            ns[a.asname or a.name] = _MODULES[f"{stmt.module}.{a.name}"]
    module = _MODULES.get(stmt.module or "") if not stmt.level else None
    for a in stmt.names if module is not None else ():
        value = getattr(module, a.name, None)
        if value is not None and (isinstance(value, _CONSTANT_TYPES) or callable(value)):
            ns[a.asname or a.name] = value


def _is_kernel(fn: ast.FunctionDef, ns: dict) -> bool:
    if not fn.decorator_list:
        return False
    innermost = fn.decorator_list[-1]
    innermost = innermost.func if isinstance(innermost, ast.Call) else innermost
    try:
        return _resolve(innermost, ns) is triton.jit
    except _NotConstant:
        return False


def _kernel(fn: ast.FunctionDef, path: Path, ns: dict, interpreted: bool):
    """One kernel compiled alone (decorators, defaults and annotations removed) into `ns`, then given its vetted
    defaults and annotations; `@triton.jit(...)`'s constant keyword arguments (do_not_specialize, debug ...)
    kept; `launch_metadata` left out (a profiler's hook, Python of the file: Triton calls it only while a launch
    hook is installed, which the checker never does). Nothing of the file's is evaluated but by `constant` and
    `_resolve`."""
    jit = fn.decorator_list[-1]
    options = {str(k.arg): _vetted(k.value, ns, fn, f"`@triton.jit`'s `{k.arg}`")
               for k in jit.keywords if k.arg != "launch_metadata"} if isinstance(jit, ast.Call) else {}
    a = fn.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p is not None)]
    annotations = {p.arg: _annotation(p.annotation, ns, fn, p.arg) for p in params if p.annotation is not None}
    if fn.returns is not None:
        annotations["return"] = _annotation(fn.returns, ns, fn, "return")
    defaults = tuple(_vetted(d, ns, fn, "a parameter default") for d in a.defaults)
    kwdefaults = {p.arg: _vetted(d, ns, fn, "a parameter default") for p, d in zip(a.kwonlyargs, a.kw_defaults)
                  if d is not None}
    bare_args = ast.arguments(
        posonlyargs=[ast.arg(p.arg) for p in a.posonlyargs], args=[ast.arg(p.arg) for p in a.args],
        vararg=ast.arg(a.vararg.arg) if a.vararg else None, kwonlyargs=[ast.arg(p.arg) for p in a.kwonlyargs],
        kw_defaults=[None] * len(a.kwonlyargs), kwarg=ast.arg(a.kwarg.arg) if a.kwarg else None, defaults=[])
    bare = ast.FunctionDef(name=fn.name, args=bare_args, body=fn.body, decorator_list=[], returns=None,
                           type_comment=None, lineno=fn.lineno, col_offset=fn.col_offset,
                           end_lineno=fn.end_lineno, end_col_offset=fn.end_col_offset)
    code = compile(ast.fix_missing_locations(ast.Module(body=[bare], type_ignores=[])), str(path), "exec")
    exec(code, ns)  # defines the plain function: its body runs only when the kernel is interpreted
    python_fn = ns[fn.name]
    python_fn.__defaults__ = defaults or None
    python_fn.__kwdefaults__ = kwdefaults or None
    python_fn.__annotations__ = annotations
    return InterpretedFunction(python_fn, **options) if interpreted else JITFunction(python_fn, **options)


def _vetted(node: ast.AST, ns: dict, fn: ast.FunctionDef, what: str) -> Any:
    try:
        if isinstance(node, ast.List):  # `do_not_specialize=["eps"]`, as FlagGems writes it: a list of constants
            return list(constant(ast.Tuple(elts=node.elts, ctx=ast.Load()), ns))
        return constant(node, ns)
    except _NotConstant:
        raise KernelSourceError(f"line {getattr(node, 'lineno', fn.lineno)}: {what} of kernel `{fn.name}` is not a "
                                "constant (a number, string, dtype or tl.constexpr, within the checker's bounds)"
                                ) from None


def _annotation(node: ast.AST, ns: dict, fn: ast.FunctionDef, name: str) -> Any:
    """A parameter's annotation: a string, or a name of the allowed modules (`tl.constexpr`); never a call."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and node.id in _KERNEL_BUILTINS and node.id not in ns:  # `eps: float`
        return _KERNEL_BUILTINS[node.id]
    if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr) and isinstance(node.right, ast.Constant)
            and node.right.value is None):  # `stride: int | None = None` (vLLM's optional strides): Triton reads
        _annotation(node.left, ns, fn, name)  # the annotation as its text; the type itself is checked as above
        return ast.unparse(node)
    try:
        return _resolve(node, ns)
    except _NotConstant:
        raise KernelSourceError(f"line {getattr(node, 'lineno', fn.lineno)}: the annotation of `{name}` in kernel "
                                f"`{fn.name}` is not a name such as tl.constexpr") from None


def _constexpr_params(fn: JITFunction) -> tuple[str, ...]:
    return tuple(p.name for p in fn.params if p.is_constexpr)


class _NotConstant(Exception):
    pass


def constant(node: ast.AST | None, ns: dict) -> Any:
    """The value of a constant expression (see the module docstring), or _NotConstant."""
    if node is None:
        raise _NotConstant
    limits: ConstantLimits = ns[_LIMITS]
    if isinstance(node, ast.Constant):
        return limits.check(node.value)
    if isinstance(node, ast.Tuple):
        return limits.check(tuple(constant(e, ns) for e in node.elts[:limits.items + 1]))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        operand = constant(node.operand, ns)
        return _like(operand, limits.check(_UNARY[type(node.op)](_plain(operand))))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = constant(node.left, ns), constant(node.right, ns)
        a, b = _plain(left), _plain(right)  # tl.constexpr's operators are the plain values' (bounded as those)
        limits.before(type(node.op), a, b)  # what would pass the bounds is never computed
        try:
            value = limits.check(_BINARY[type(node.op)](a, b))
        except (ArithmeticError, TypeError, ValueError):  # 1 / 0, "a" - 1: no constant (Python would raise too)
            raise _NotConstant from None
        return _like(left if isinstance(left, tl.constexpr) else right, value)
    if isinstance(node, ast.Call) and not node.keywords and len(node.args) <= 1:
        fn = _resolve(node.func, ns)
        if fn is tl.constexpr:
            return tl.constexpr(_plain(constant(node.args[0], ns)) if node.args else None)
    if isinstance(node, (ast.Name, ast.Attribute)):
        value = _resolve(node, ns)
        if isinstance(value, _CONSTANT_TYPES) or (isinstance(value, tuple) and all(
                isinstance(v, _CONSTANT_TYPES) for v in value)):
            return value
    raise _NotConstant


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, tl.constexpr) else value


def _like(operand: Any, value: Any) -> Any:
    """`value` as a tl.constexpr when the operand was one (as tl.constexpr's own operators return)."""
    return tl.constexpr(value) if isinstance(operand, tl.constexpr) else value


def _resolve(node: ast.AST, ns: dict):
    """A name or an attribute chain on an imported module (only chains of plain names, no dunders)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id.startswith("__") or node.id not in ns:
        raise _NotConstant
    value = ns[node.id]
    for part in reversed(parts):
        if part.startswith("_"):
            raise _NotConstant
        value = getattr(value, part, _missing)
        if value is _missing:
            raise _NotConstant
    return value


_missing = object()
_LIMITS = " constant limits"  # the namespace's key for its ConstantLimits: no name in a file can read it
