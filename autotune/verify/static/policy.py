"""The candidate policy: a static scan of the source against an allow-list (ast only, never executed), and
the run-time op rule.

A candidate is one file: imports, constants, `@triton.jit` kernels (optionally under @triton.autotune /
@triton.heuristics) and plain-Python launchers. Every name, attribute and call in it must be listed in
`autotune.verify.static.allowlist` for where it appears (kernel or launcher) and how it is used. On top of that:
no dunder names or attributes at all; no attribute assignment (patching a library, or a tensor's
`.data`); no aliasing of listed functions or modules (`f = torch.empty`, `t = torch`), so that every call
the scan accepts is one it saw; no try/with/global/class/nested def; no string formatting outside error
messages (the repr of a kernel object tells the interpreter from a GPU); `.device` only passed along as an
argument, never in a condition. A builtin's name always means the builtin, refused unless listed, before
anything else looks at it: the file's globals are only the names its top-level assignments store (`d[exec] = 1`
reads `exec`, issue 17), no top-level import or def takes a builtin's or an earlier binding's name, and
comprehensions and lambdas (their defaults evaluated outside) are scopes of their own. Every finding is
reported; the first is the verdict's reason.

The scan cannot see through operators (`x * w` on tensors): the run-time rule catches those, from the
aten ops the worker records during each call (`runtime_violations`). What Triton's compiler would
reject (a module-level float in a kernel, a non-jit helper called from one) is left to the compiler,
which the worker runs on every kernel before the interpreter (autotune.verify.device.frontend).
"""

from __future__ import annotations

import ast
import builtins
import threading
from typing import TYPE_CHECKING

from autotune.verify.static import hooks, names, statics
from autotune.verify.static.allowlist import (
    ALLOWED_IMPORTS,
    ATTRIBUTES,
    BUILTINS,
    CONVERSIONS,
    HOOK_ATTRIBUTES,
    IMPORTS,
    KERNEL_ATTRIBUTES,
    KERNEL_BUILTINS,
    KERNEL_LIBDEVICE,
    LIBDEVICE,
    METHODS,
    NAMES,
    Use,
)

if TYPE_CHECKING:  # the worker imports this module and must not hold the targets (their references)
    from autotune.targets.base import Target

__all__ = ["ALLOWED_IMPORTS", "RUNTIME_ALLOWED_OPS", "parse", "runtime_violations", "scan"]

# Aten ops a candidate's Python may run at call time, outside what its kernels do.
RUNTIME_ALLOWED_OPS = {
    "aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty", "aten.new_empty_strided",
    "aten.zeros", "aten.zeros_like", "aten.new_zeros", "aten.zero_",
    "aten.view", "aten._unsafe_view", "aten.reshape", "aten._reshape_alias", "aten.as_strided", "aten.slice",
    "aten.select", "aten.split", "aten.split_with_sizes", "aten.unbind", "aten.expand", "aten.squeeze",
    "aten.unsqueeze", "aten.flatten", "aten.unflatten", "aten.permute", "aten.transpose", "aten.t", "aten.alias",
    "aten.detach", "aten.clone", "aten.contiguous", "aten.copy_", "aten._to_copy", "aten.lift_fresh",
    "aten.set_",  # the interpreter re-views its host copies of the arguments with set_
    "aten.sym_size", "aten.sym_stride", "aten.sym_numel", "aten.sym_storage_offset", "aten.is_contiguous",
}

_KERNEL_DECORATORS = ("triton.jit", "triton.autotune", "triton.heuristics")
_MODULE_STATEMENTS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.Assign, ast.AnnAssign)
_BODY_STATEMENTS = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.If, ast.For, ast.While, ast.Break,
                    ast.Continue, ast.Pass, ast.Expr, ast.Assert, ast.Raise, ast.Delete)
_PYTHON_BUILTINS = frozenset(dir(builtins))
_ANNOTATION_TYPES = frozenset({"int", "float", "bool", "str", "tuple", "list", "dict"})
_COMPREHENSIONS = names.COMPREHENSIONS


def runtime_violations(ops: dict[str, int]) -> list[str]:
    """The recorded aten ops that are torch math (or dtype conversions) rather than allocation/views."""
    return sorted(f"{name} x{count}" for name, count in ops.items() if name not in RUNTIME_ALLOWED_OPS)


# CPython 3.11's parser is not safe to run from two threads at once (seen here on 3.11.7, with the agent
# judging candidates in parallel threads: "SystemError: AST constructor recursion depth mismatch").
_PARSE_LOCK = threading.Lock()


def parse(source: str, filename: str = "<candidate>") -> ast.Module:
    """The candidate's syntax tree, kernels made by assignment written as the decorated functions they are (see
    `names.decorate_assigned_kernels`); SyntaxError propagates (it is a compile error, not a policy one)."""
    with _PARSE_LOCK:
        tree = ast.parse(source, filename=filename)
    names.decorate_assigned_kernels(tree)
    return tree


def scan(tree: ast.Module, target: Target) -> list[str]:
    """Every policy finding, as 'line N: what and what to do instead'; [] when the file is clean."""
    scanner = _Scanner(tree)
    scanner.run()
    findings = scanner.findings + _entry_findings(tree, target, scanner.kernels) + statics.findings(tree)
    if not scanner.kernels:
        findings.append("no @triton.jit kernel: the math must happen in a Triton kernel the entry function launches")
    return sorted(dict.fromkeys(findings), key=_line_of)  # stable: on one line, the order they were found


def kernel_findings(tree: ast.Module) -> list[str]:
    """The findings of the scan in the file's imports and its @triton.jit kernels alone (their decorators but the
    jit one left out): what the device process checks before it compiles a kernel, whatever the judge's own scan
    said (autotune.verify.device.loader)."""
    kept: list[ast.stmt] = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            kept.append(stmt)
        elif isinstance(stmt, ast.FunctionDef) and stmt.decorator_list:
            jit = stmt.decorator_list[-1]
            bare = ast.FunctionDef(name=stmt.name, args=stmt.args, body=stmt.body, decorator_list=[jit],
                                   returns=stmt.returns, type_comment=None, lineno=stmt.lineno,
                                   col_offset=stmt.col_offset)
            kept.append(bare)
    scanner = _Scanner(ast.Module(body=kept, type_ignores=[]))
    scanner.run()
    # An import the device does not make is the host's business (`import os`: the device binds nothing); one from
    # a module it binds names of counts (`from triton.language import device_print as p` would bind `p`).
    unbound = {s.lineno for s in kept if isinstance(s, ast.Import) or (
        isinstance(s, ast.ImportFrom) and (s.level or s.module not in IMPORTS))}
    return sorted(dict.fromkeys(f for f in scanner.findings if _line_of(f) not in unbound), key=_line_of)


def _line_of(finding: str) -> int:
    head = finding.split(":", 1)[0]
    return int(head.split()[1]) if head.startswith("line ") else 10**9


def _entry_findings(tree: ast.Module, target: Target, kernels: set[str]) -> list[str]:
    entry = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == target.name), None)
    if entry is None:
        return [f"no entry function: define `{target.signature}` at the top level of the file"]
    if entry.name in kernels:
        return [f"line {entry.lineno}: the entry function `{target.name}` must be a plain Python launcher, "
                "not a @triton.jit kernel"]
    a = entry.args
    positional = len(a.posonlyargs) + len(a.args)
    required = positional - len(a.defaults)
    wanted = len(target.arg_names)
    if not (required <= wanted <= positional or (a.vararg is not None and required <= wanted)):
        return [f"line {entry.lineno}: `{target.name}` takes {required} required arguments; the model calls "
                f"`{target.signature}`"]
    return []


class _Scanner:
    """One pass over the tree. `mode` is where the node sits: 'kernel', 'launcher' or 'annotation'."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.findings: list[str] = []
        self.parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        self.aliases: dict[str, str] = {}  # import-bound name -> dotted path
        self.kernels: set[str] = set()  # top-level functions decorated with @triton.jit
        self.functions: set[str] = set()  # top-level plain functions
        self.globals: set[str] = set()  # every other name bound at the top level
        self.scopes: list[set[str]] = []  # names bound in the enclosing functions and lambdas
        self.hooks: set[str] = set()  # top-level functions used only as `@triton.jit(launch_metadata=...)`
        self.hooked: set[int] = set()  # the ids of the nodes inside them

    def flag(self, node: ast.AST, message: str) -> None:
        self.findings.append(f"line {getattr(node, 'lineno', 0)}: {message}")

    def run(self) -> None:
        for stmt in self.tree.body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                self.imports(stmt)
            elif isinstance(stmt, ast.FunctionDef):
                jit = bool(stmt.decorator_list) and self.dotted(names.callee(stmt.decorator_list[-1])) == "triton.jit"
                self.shadows(stmt, {stmt.name: None})
                (self.kernels if jit else self.functions).add(stmt.name)
            elif alias := names.kernel_alias(stmt, self.kernels):  # `_k = _body`, a kernel made by assignment (parse)
                self.kernels.add(alias)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                self.globals |= names.stored_names(stmt)  # a name only read in a target (`d[exec] = 1`) is a use
        self.hooks = hooks.named(self.tree, self.functions, lambda d: self.decorating(d) and self.dotted(
            names.callee(d)) == "triton.jit")
        self.hooked = {id(n) for s in self.tree.body if isinstance(s, ast.FunctionDef) and s.name in self.hooks
                       for n in ast.walk(s)}
        for stmt in self.tree.body:
            if isinstance(stmt, ast.FunctionDef):
                self.function(stmt)
            elif names.kernel_alias(stmt, self.kernels):
                continue
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                self.walk(stmt, "launcher")
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # the docstring
            elif isinstance(stmt, ast.ClassDef):
                self.flag(stmt, f"defines class `{stmt.name}`: a kernel file needs none (a tensor subclass can defer "
                                "work past the check)")
            elif not isinstance(stmt, _MODULE_STATEMENTS):
                self.walk(stmt, "launcher")  # first: what it does is the more useful finding (`open`, ...)
                self.flag(stmt, f"a top-level `{type(stmt).__name__.lower()}` statement: the top level of a kernel "
                                "file holds imports, constants and functions only")

    # imports -----------------------------------------------------------------------------------
    def imports(self, node: ast.Import | ast.ImportFrom) -> None:
        allowed = ", ".join(ALLOWED_IMPORTS)
        if isinstance(node, ast.Import):
            self.shadows(node, {a.asname or a.name.split(".")[0]: a.name if a.asname else a.name.split(".")[0]
                                for a in node.names})
            for a in node.names:
                if a.name not in IMPORTS:
                    self.flag(node, f"imports `{a.name}` (allowed: {allowed})")
                elif a.asname:
                    self.aliases[a.asname] = a.name
                else:  # `import triton.language` binds `triton`
                    self.aliases[a.name.split(".")[0]] = a.name.split(".")[0]
            return
        module = node.module or ""
        # `from triton.language.extra import libdevice`: a listed module imported from its parent
        submodules = all(f"{module}.{a.name}" in IMPORTS for a in node.names)
        if node.level or (module not in IMPORTS and not submodules):
            self.flag(node, f"imports from `{'.' * node.level}{module}` (allowed: {allowed})")
            return
        self.shadows(node, {a.asname or a.name: f"{module}.{a.name}" for a in node.names if a.name != "*"})
        for a in node.names:
            dotted = f"{module}.{a.name}"
            libdevice = module == LIBDEVICE and a.name in KERNEL_LIBDEVICE  # used in kernels only (dotted_use)
            if a.name == "*" or (dotted not in NAMES and dotted not in IMPORTS and not libdevice):
                self.flag(node, f"imports `{dotted}`, which is not on the allow-list")
            else:
                self.aliases[a.asname or a.name] = dotted

    def shadows(self, node: ast.AST, names: dict[str, str | None]) -> None:
        """A top-level import or def may not take a builtin's name or one bound before it: the scan reads every
        use of a name as the one binding it knows (`open` as Python's, which it refuses; `torch` as the module,
        not a function `def torch()` that replaced it; an import at the top of the file, not a later one).
        `names`: name -> the module path an import binds it to (the same import twice is fine), None for a def."""
        for name, dotted in names.items():
            if name in _PYTHON_BUILTINS:
                self.flag(node, f"rebinds the builtin name `{name}`")
            elif ((name in self.aliases and self.aliases[name] != dotted) or name in self.kernels
                  or name in self.functions):
                self.flag(node, f"rebinds the top-level name `{name}`: give each import and function its own name")

    # functions ---------------------------------------------------------------------------------
    def function(self, node: ast.FunctionDef) -> None:
        self.decorators(node)
        self.body(node, "kernel" if node.name in self.kernels else "launcher")
        for n, message in hooks.findings(node, self.dotted) if node.name in self.hooks else ():
            self.flag(n, message)

    def body(self, node: ast.FunctionDef, mode: str) -> None:
        """A function's defaults and annotations (evaluated where it is defined), then its body in a scope of its own:
        a top-level function's, or a plain one's inside the launcher (a grid function of META, as a lambda with
        lines: launcher code)."""
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.walk(default, "launcher")
        for arg in names.all_args(node.args):
            if arg.annotation is not None:
                self.walk(arg.annotation, "annotation")
        if node.returns is not None:
            self.walk(node.returns, "annotation")
        self.scopes.append(names.param_names(node.args) | names.locals(node))
        for stmt in node.body:
            self.statement(stmt, mode)
        self.scopes.pop()

    def decorators(self, node: ast.FunctionDef) -> None:
        for d in node.decorator_list:
            name = self.dotted(names.callee(d))
            if name not in _KERNEL_DECORATORS:
                callee = ast.unparse(names.callee(d))
                self.flag(d, f"decorator `{callee}` (allowed: @triton.jit, under @triton.autotune or "
                             "@triton.heuristics)")
            elif name != "triton.jit" and self.dotted(names.callee(node.decorator_list[-1])) != "triton.jit":
                self.flag(d, f"`@{name}` wraps a function that is not @triton.jit: put @triton.jit innermost")
            if isinstance(d, ast.Call):
                for arg in [*d.args, *(k.value for k in d.keywords)]:
                    self.walk(arg, "launcher")

    def statement(self, stmt: ast.stmt, mode: str) -> None:
        if isinstance(stmt, (ast.Global, ast.Nonlocal)):
            self.flag(stmt, "declares a global: a candidate keeps no state between calls")
        elif isinstance(stmt, ast.FunctionDef) and mode == "launcher" and not stmt.decorator_list:
            self.body(stmt, "launcher")  # `def grid(META): return (triton.cdiv(n, META["BLOCK"]),)`
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.flag(stmt, f"defines `{stmt.name}` inside a {'kernel' if mode == 'kernel' else 'function'}"
                            f"{' with a decorator' if getattr(stmt, 'decorator_list', None) else ''}: define kernels "
                            "and helpers at the top level (and no classes: a tensor subclass can defer work past the "
                            "check)")
        elif not isinstance(stmt, _BODY_STATEMENTS):
            self.walk(stmt, mode)
            self.flag(stmt, f"a `{type(stmt).__name__.lower()}` statement: no try/with/import inside functions (a "
                            "fallback path would run differently on the interpreter and on a GPU)")
        else:
            self.walk(stmt, mode)

    # expressions -------------------------------------------------------------------------------
    def walk(self, root: ast.AST, mode: str) -> None:
        """Check every node under root; statements nested in if/for/while go through `statement`."""
        nodes = [root] if not isinstance(root, ast.stmt) else list(ast.iter_child_nodes(root))
        if isinstance(root, ast.AnnAssign):
            self.walk(root.annotation, "annotation")
            nodes = [n for n in (root.target, root.value) if n is not None]
        for node in nodes:
            if mode == "annotation" and isinstance(node, (ast.Call, ast.Lambda, *_COMPREHENSIONS)):
                self.flag(node, f"computes `{ast.unparse(node)}` in an annotation: annotate with types only")
            elif isinstance(node, ast.stmt):
                self.statement(node, mode)
            elif isinstance(node, ast.Lambda):
                for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
                    self.walk(default, mode)  # evaluated where the lambda is written, in the enclosing scope
                self.scopes.append(names.param_names(node.args) | names.locals(node))
                self.walk(node.body, "launcher")
                self.scopes.pop()
            elif isinstance(node, _COMPREHENSIONS):
                self.comprehension(node, mode)
            else:
                self.node(node, mode)
                if not (isinstance(node, ast.Attribute) and self.dotted(node) is not None):
                    for child in ast.iter_child_nodes(node):
                        self.walk(child, mode)
        if isinstance(root, ast.stmt):
            self.stored(root)

    def comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp, mode: str) -> None:
        """A comprehension is a scope of its own: its variables do not leak into the function's (`open` after
        `[0 for open in ()]` is Python's open). Its first iterable is evaluated outside that scope."""
        first, *rest = node.generators
        self.walk(first.iter, mode)
        self.scopes.append({n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)})
        self.walk(first.target, mode)
        for part in [*first.ifs, *[x for g in rest for x in (g.target, g.iter, *g.ifs)],
                     *([node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt])]:
            self.walk(part, mode)
        self.scopes.pop()

    def node(self, node: ast.AST, mode: str) -> None:
        if isinstance(node, ast.Name):
            self.name(node, mode)
        elif isinstance(node, ast.Attribute):
            self.attribute(node, mode)
        elif isinstance(node, ast.Call):
            self.call(node, mode)
        elif isinstance(node, ast.JoinedStr) or (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod)
                                                 and isinstance(node.left, ast.Constant)
                                                 and isinstance(node.left.value, str)):
            if not (self.inside(node, (ast.Raise, ast.Assert)) or id(node) in self.hooked):
                self.flag(node, "formats a string outside an error message (the text of a kernel object differs "
                                "between the interpreter and a GPU)")
        elif isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr)):
            self.flag(node, f"uses `{type(node).__name__}`: a launcher is a plain function")

    def name(self, node: ast.Name, mode: str) -> None:
        if names.dunder(node.id):
            self.flag(node, f"uses `{node.id}` (no interpreter internals)")
            return
        if not isinstance(node.ctx, ast.Load) or any(node.id in s for s in self.scopes):
            return  # a parameter may shadow a builtin (`input`); a local may not (`stored` refuses that)
        if node.id in _PYTHON_BUILTINS and not (mode == "annotation" and node.id in _ANNOTATION_TYPES):
            # before anything else looks at the name: a file cannot make `exec` its own global
            table = KERNEL_BUILTINS if mode == "kernel" else BUILTINS
            self.use(node, node.id, table.get(node.id), f"the builtin `{node.id}`", ", ".join(sorted(table)))
        elif node.id in self.aliases:
            parent = self.parents.get(node)
            if not (isinstance(parent, ast.Attribute) and parent.value is node):
                self.dotted_use(node, self.aliases[node.id], mode)
        elif node.id in self.kernels:
            self.kernel_use(node, mode)
        # else: the file's own function or global, or a name Python does not have (a NameError on import)

    def kernel_use(self, node: ast.Name, mode: str) -> None:
        parent = self.parents.get(node)
        launched = isinstance(parent, ast.Subscript) and isinstance(self.parents.get(parent), ast.Call) \
            and getattr(self.parents[parent], "func", None) is parent
        called = isinstance(parent, ast.Call) and parent.func is node
        if mode == "kernel" and called:
            return  # a @triton.jit helper called from a kernel
        if not launched:
            self.flag(node, f"uses the kernel `{node.id}` other than launching it: write `{node.id}[grid](...)`")

    def attribute(self, node: ast.Attribute, mode: str) -> None:
        if names.dunder(node.attr):
            self.flag(node, f"accesses `.{node.attr}` (introspection of objects and modules is not allowed)")
            return
        if not isinstance(node.ctx, ast.Load):
            self.flag(node, f"assigns to `{ast.unparse(node)}`: a candidate sets no attributes "
                            "(patching a library, or swapping a tensor's data)")
            return
        dotted = self.dotted(node)
        if dotted is not None:
            self.dotted_use(node, dotted, mode)
        elif mode == "kernel":
            self.use(node, node.attr, KERNEL_ATTRIBUTES.get(node.attr), f"`.{node.attr}` in a kernel",
                     "Triton tensor members")
        elif node.attr in CONVERSIONS or (node.attr == "to" and not names.device_only(self.parents.get(node))):
            self.flag(node, f"converts a dtype with `.{node.attr}{'(...)' if node.attr == 'to' else '()'}` outside "
                            "a kernel: load and convert inside the kernel")
        elif node.attr == "device" and not self.passed_on(node):
            self.flag(node, "reads `.device` other than to pass it on: a candidate may not choose its path by the "
                            "device it runs on")
        else:
            entry = METHODS.get(node.attr) or ATTRIBUTES.get(node.attr) or (
                HOOK_ATTRIBUTES.get(node.attr) if id(node) in self.hooked else None)
            called = isinstance(self.parents.get(node), ast.Call) and getattr(self.parents[node], "func", None) is node
            self.use(node, node.attr, entry, f"`.{node.attr}{'()' if called else ''}` outside a kernel",
                     "allocation, views/reshapes, contiguity and shape/stride/dtype queries; the math goes in the "
                     "kernel")

    def dotted_use(self, node: ast.AST, dotted: str, mode: str) -> None:
        if mode == "kernel" and dotted.split(".")[0] == "torch":
            self.flag(node, f"uses torch (`{dotted}`) inside a Triton kernel")
            return
        entry = NAMES.get(dotted)
        if entry is None and mode == "kernel" and dotted.startswith("triton.language."):
            entry = names.kernel_tl(dotted)
            if entry is None and not names.exists(dotted):
                return  # a typo like tl.lod: Triton's compiler reports it (compile_error)
        if mode == "annotation" and entry is not None and entry[0] in (Use.ANNOTATION, Use.VALUE, Use.MODULE):
            return
        self.use(node, dotted, entry, f"`{dotted}`", "see autotune/verify/static/allowlist.py")

    def use(self, node: ast.AST, name: str, entry: tuple[Use, str] | None, what: str, allowed: str) -> None:
        """Whether a listed name is used the way its entry allows."""
        if entry is None:
            self.flag(node, f"uses {what}, which is not on the allow-list (allowed: {allowed})")
            return
        parent = self.parents.get(node)
        called = isinstance(parent, ast.Call) and parent.func is node
        use = entry[0]
        if use is Use.CALL and not called:
            self.flag(node, f"takes {what} without calling it: call listed functions directly (no aliases)")
        elif use is Use.MODULE and not (isinstance(parent, ast.Attribute) and parent.value is node):
            self.flag(node, f"uses the module {what} as a value: reach only listed names through it")
        elif use is Use.DECORATOR and not self.decorating(node):
            self.flag(node, f"uses {what} other than as a decorator")
        elif use is Use.ANNOTATION and not self.inside_annotation(node):
            self.flag(node, f"uses {what} other than in an annotation")

    def call(self, node: ast.Call, mode: str) -> None:
        func = node.func
        if isinstance(func, (ast.Name, ast.Attribute)):
            if isinstance(func, ast.Name) and any(func.id in s for s in self.scopes):
                self.flag(node, f"calls `{func.id}`, a value: call only functions this file defines or the "
                                "allow-list names")
            return  # names and attributes are checked where they are visited
        is_launch = isinstance(func, ast.Subscript) and isinstance(func.value, ast.Name) \
            and func.value.id in self.kernels and mode == "launcher"
        if not is_launch:
            self.flag(node, f"calls `{ast.unparse(func)}`: the only computed call is a launch, `kernel[grid](...)`")

    def stored(self, stmt: ast.stmt) -> None:
        for target in names.targets(stmt):
            for n in ast.walk(target):
                if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load) and (
                        n.id in self.aliases or n.id in _PYTHON_BUILTINS):
                    kind = "imported" if n.id in self.aliases else "builtin"
                    self.flag(n, f"rebinds the {kind} name `{n.id}`")
                elif isinstance(n, ast.Subscript) and self.dotted(n.value) is not None:
                    self.flag(n, f"assigns into `{ast.unparse(n.value)}` (patching a library)")

    # helpers -----------------------------------------------------------------------------------
    def dotted(self, node: ast.AST) -> str | None:
        """`tl.load` -> 'triton.language.load' for chains rooted at an imported name, else None."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.aliases or any(node.id in s for s in self.scopes):
            return None
        return ".".join([self.aliases[node.id], *reversed(parts)])

    def passed_on(self, node: ast.Attribute) -> bool:
        """`x.device` as `device=` of an allocation or `.to(...)`, or the argument of `.to(...)`."""
        parent = self.parents.get(node)
        call = self.parents.get(parent) if isinstance(parent, ast.keyword) and parent.arg == "device" else parent
        if not isinstance(call, ast.Call) or call.func is node:
            return False
        func = call.func
        if isinstance(parent, ast.keyword):
            name = self.dotted(func) or (func.attr if isinstance(func, ast.Attribute) else "")
            return name.startswith("torch.") or name in ("to", "new_empty", "new_zeros", "new_empty_strided")
        return isinstance(func, ast.Attribute) and func.attr == "to"

    def inside(self, node: ast.AST, kinds: tuple) -> bool:
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, kinds):
                return True
        return False

    def decorating(self, node: ast.AST) -> bool:
        parent = self.parents.get(node)
        if isinstance(parent, ast.Call) and parent.func is node:
            node, parent = parent, self.parents.get(parent)
        return isinstance(parent, ast.FunctionDef) and node in parent.decorator_list

    def inside_annotation(self, node: ast.AST) -> bool:
        while node in self.parents:
            parent = self.parents[node]
            if (isinstance(parent, ast.arg) and parent.annotation is node) or (
                    isinstance(parent, ast.FunctionDef) and parent.returns is node):
                return True
            node = parent
        return False
