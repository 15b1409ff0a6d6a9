"""Reading a candidate's syntax tree for the policy scan: the names a statement or function binds, a call's callee,
a kernel's triton.language name looked up in the allow-list."""

from __future__ import annotations

import ast

from autotune.verify.static.allowlist import KERNEL_LIBDEVICE, KERNEL_MATH, KERNEL_TL, LIBDEVICE, Use

COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def kernel_tl(dotted: str) -> tuple[Use, str] | None:
    if dotted.startswith(LIBDEVICE + "."):
        return KERNEL_LIBDEVICE.get(dotted[len(LIBDEVICE) + 1:])
    parts = dotted.split(".")[2:]
    if len(parts) == 1:
        return KERNEL_TL.get(parts[0])
    if len(parts) == 2 and parts[0] == "math":
        return KERNEL_MATH.get(parts[1])
    return None


def exists(dotted: str) -> bool:
    """Whether triton.language has this attribute chain (imported only for names off the allow-list)."""
    import importlib

    missing = object()
    module = LIBDEVICE if dotted.startswith(LIBDEVICE + ".") else "triton.language"  # a submodule tl may not hold yet
    obj: object = importlib.import_module(module)
    for part in dotted.split(".")[len(module.split(".")):]:
        obj = getattr(obj, part, missing)
        if obj is missing:
            return False
    return True


def callee(node: ast.AST) -> ast.AST:
    return node.func if isinstance(node, ast.Call) else node


def all_args(args: ast.arguments) -> list[ast.arg]:
    return [a for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a is not None]


def param_names(args: ast.arguments) -> set[str]:
    return {a.arg for a in all_args(args)}


def locals(fn: ast.AST) -> set[str]:
    """Names a function or lambda binds (assignments, loop targets), not in nested scopes (functions, lambdas,
    classes, comprehensions: `Scanner.comprehension` gives those their own)."""
    found: set[str] = set()
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)  # a nested def binds its name here; its body is its own scope
            continue
        if isinstance(node, (ast.Lambda, *COMPREHENSIONS)):
            continue
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            found.add(node.id)
        stack.extend(ast.iter_child_nodes(node))
    return found


def stored_names(stmt: ast.stmt) -> set[str]:
    """The names a statement binds: Name nodes in Store context in its targets, not those a target reads (a
    subscript's key, an attribute's base)."""
    return {n.id for t in targets(stmt) for n in ast.walk(t)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def targets(stmt: ast.stmt) -> list[ast.AST]:
    if isinstance(stmt, ast.Assign):
        return list(stmt.targets)
    if isinstance(stmt, (ast.AugAssign, ast.AnnAssign, ast.For)):
        return [stmt.target]
    if isinstance(stmt, ast.Delete):
        return list(stmt.targets)
    return []


def dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def device_only(call: ast.AST | None) -> bool:
    """`.to(x.device)`, `.to("cuda")`, `.to(device=...)`: a move, not a conversion."""
    if not isinstance(call, ast.Call):
        return False
    if any(k.arg not in ("device", "non_blocking") for k in call.keywords):
        return False
    return all((isinstance(a, ast.Attribute) and a.attr == "device")
               or (isinstance(a, ast.Constant) and isinstance(a.value, str)) for a in call.args)


def decorate_assigned_kernels(tree: ast.Module) -> None:
    """`_k = triton.jit(_body)` and `_k = triton.heuristics({...})(triton.jit(_body))` at the top level, as
    Liger-Kernel and vLLM write a kernel shared by two configurations, are the decorators on `_body`'s def: its
    decorator list takes them (outermost first) and the assignment becomes `_k = _body`, an alias the scan knows as
    the kernel (the host reports the launch by the function's own name, `_body`, as Triton names it). Only for a
    top-level undecorated def above the assignment, taken once; the scan then vets the decorators as on any def."""
    defs = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            continue
        chain, inner = [], stmt.value
        while isinstance(inner, ast.Call) and len(inner.args) == 1 and not inner.keywords:
            chain.append(inner.func)
            inner = inner.args[0]
        fn = defs.get(inner.id) if isinstance(inner, ast.Name) and chain else None
        if fn is None or fn.decorator_list or fn.lineno > stmt.lineno:
            continue
        fn.decorator_list = chain
        stmt.value = ast.copy_location(ast.Name(id=fn.name, ctx=ast.Load()), stmt.value)


def kernel_alias(stmt: ast.stmt, kernels: set[str]) -> str:
    """NAME of `NAME = KERNEL` at the top level (what decorate_assigned_kernels leaves of a kernel made by
    assignment), else ''."""
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Name) and stmt.value.id in kernels):
        return stmt.targets[0].id
    return ""
