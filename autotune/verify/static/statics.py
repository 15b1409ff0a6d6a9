"""No state survives a call: the candidate's module-level values and default arguments are immutable constants,
and no function mutates a module-level name. A static rule of the candidate policy (autotune.verify.static.policy calls
`findings`); at run time the host process also compares the module's globals after every call, the device
refuses a storage kept from an earlier call, and the case plan ends a case with thousands of calls.

Constant expressions: numbers, strings, None/True/False, tuples of constants, arithmetic and comparisons on
them, names of other module-level constants, dotted names (`tl.float32`: the allow-list judges which), and calls
of `tl.constexpr`, `triton.Config` (its dict of meta-parameters included), `tuple(...)` (of a generator over
constants: `tuple(triton.Config(...) for b in (64, 128))`) and a few pure builtins and helpers. A list, dict
or set at the top level, or as a default value, is a place to keep state (a counter appended to on every
call was one attacker's way to change behaviour after 2,048 calls): a tuple does the same job.
"""

from __future__ import annotations

import ast

_PURE_CALLS = frozenset({"tuple", "int", "float", "bool", "str", "min", "max", "abs", "round", "len", "range"})
_PURE_DOTTED_SUFFIXES = ("constexpr", "Config", "next_power_of_2", "cdiv")  # tl.constexpr, triton.Config, ...
_MUTATORS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "popitem",
                       "add", "discard", "sort", "reverse", "fill_", "zero_", "copy_", "resize_", "set_"})


def findings(tree: ast.Module) -> list[str]:
    """'line N: ...' for every module-level value or default that is not a constant, and every mutation of a
    module-level name inside a function."""
    names = _module_names(tree)
    found: list[str] = []
    for stmt in tree.body:
        targets: list = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None and all(
                isinstance(t, (ast.Name, ast.Tuple)) for t in targets):  # other targets: the scan refuses them
            bad = _not_constant(stmt.value, names)
            if bad is not None:
                target = ast.unparse(targets[0])
                found.append(f"line {stmt.lineno}: the module-level `{target}` is {bad}: module-level values must be "
                             "immutable constants (numbers, strings, tuples, tl.constexpr), so that no state "
                             "survives a call; use a tuple")
        elif isinstance(stmt, ast.FunctionDef):
            found += _function_findings(stmt, names)
    return found


def _module_names(tree: ast.Module) -> set[str]:
    """Names stored by the module's top-level assignments."""
    stored = set()
    for stmt in tree.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(
            stmt, (ast.AnnAssign, ast.AugAssign)) else []
        for t in targets:
            stored |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return stored


def _not_constant(node: ast.AST, names: set[str], in_config: bool = False) -> str | None:
    """None when `node` is a constant expression, else what it is ('a list', 'a call of torch.empty', ...)."""
    if isinstance(node, ast.Constant):
        return None
    if isinstance(node, (ast.Tuple,)):
        return _first(_not_constant(e, names) for e in node.elts)
    if isinstance(node, ast.UnaryOp):
        return _not_constant(node.operand, names)
    if isinstance(node, ast.BinOp):
        return _first(_not_constant(e, names) for e in (node.left, node.right))
    if isinstance(node, (ast.BoolOp,)):
        return _first(_not_constant(e, names) for e in node.values)
    if isinstance(node, ast.Compare):
        return _first(_not_constant(e, names) for e in (node.left, *node.comparators))
    if isinstance(node, ast.IfExp):
        return _first(_not_constant(e, names) for e in (node.test, node.body, node.orelse))
    if isinstance(node, (ast.Name, ast.Attribute)):
        return None  # a name or a dotted name: what it may name is the allow-list's business
    if isinstance(node, ast.Dict) and in_config:  # triton.Config's meta-parameters
        return _first(_not_constant(e, names) for e in [*node.keys, *node.values] if e is not None)
    if isinstance(node, ast.Call):
        return _call(node, names)
    kinds = {ast.List: "a list", ast.Dict: "a dict", ast.Set: "a set", ast.ListComp: "a list comprehension",
             ast.DictComp: "a dict comprehension", ast.SetComp: "a set comprehension", ast.Lambda: "a lambda"}
    return kinds.get(type(node), f"a `{type(node).__name__.lower()}` expression")


def _call(node: ast.Call, names: set[str]) -> str | None:
    func = ast.unparse(node.func)
    pure = func in _PURE_CALLS or (isinstance(node.func, ast.Attribute) and node.func.attr in _PURE_DOTTED_SUFFIXES) \
        or func.startswith("math.")
    if not pure:
        return f"a call of `{func}`"
    config = isinstance(node.func, ast.Attribute) and node.func.attr == "Config"
    args = [*node.args, *(k.value for k in node.keywords)]
    if func == "tuple" and len(args) == 1 and isinstance(args[0], ast.GeneratorExp):
        gen = args[0]
        parts = [gen.elt, *(g.iter for g in gen.generators), *(c for g in gen.generators for c in g.ifs)]
        return _first(_not_constant(e, names) for e in parts)
    return _first(_not_constant(a, names, in_config=config) for a in args)


def _first(reasons) -> str | None:
    return next((r for r in reasons if r is not None), None)


def _function_findings(fn: ast.FunctionDef, names: set[str]) -> list[str]:
    found = []
    defaults = [*fn.args.defaults, *(d for d in fn.args.kw_defaults if d is not None)]
    for d in defaults:
        bad = _not_constant(d, names)
        if bad is not None:
            found.append(f"line {d.lineno}: a default value of `{fn.name}` is {bad}: default values must be "
                         "immutable constants (a mutable default keeps state between calls)")
    local = _bound_in(fn)
    for node in ast.walk(fn):
        base: ast.AST | None = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS:
            base, what = node.func.value, f"calls `.{node.func.attr}()` on"
        elif isinstance(node, ast.Subscript) and not isinstance(node.ctx, ast.Load):
            base, what = node.value, "assigns into"
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            base, what = node.target, "updates"
        if isinstance(base, ast.Name) and base.id in names and base.id not in local:
            line = getattr(node, "lineno", fn.lineno)
            found.append(f"line {line}: `{fn.name}` {what} the module-level `{base.id}`: a candidate keeps no "
                         "state between calls")
    return found


def _bound_in(fn: ast.FunctionDef) -> set[str]:
    args = fn.args
    params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a}
    stored = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return params | stored
