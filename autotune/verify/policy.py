"""The candidate policy: a static scan of the source (ast only, never executed) and the run-time op rule.

A candidate is one file that launches `@triton.jit` kernels doing the target's math. Outside kernels it
may allocate (`torch.empty*`, `torch.zeros*`), reshape and view, make contiguous, and ask shapes,
strides, dtypes and devices; nothing else in torch. It imports only torch, triton, triton.language,
math, typing, functools and __future__, and it does not reach for processes, the network, the file
system, FFI, or dynamic import/exec/introspection tricks. Every finding is reported, the first one is the
verdict's reason.

The scan is advisory in the sense that it is not what keeps the machine safe (the sandbox is), and it
cannot see through operators (`x * w` on tensors): the run-time rule catches those, from the aten ops
the worker records during each call (`runtime_violations`).
"""

from __future__ import annotations

import ast
import threading

from autotune.targets.base import Target

ALLOWED_IMPORTS = ("torch", "triton", "triton.language", "math", "typing", "functools", "__future__")
TORCH_ALLOWED = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like",  # allocation
    "Tensor", "Size", "dtype", "device", "finfo", "iinfo", "float32", "float16", "bfloat16", "float64", "float",
    "half", "double", "int8", "int16", "int32", "int64", "uint8", "bool", "long", "int", "cuda",
}
TORCH_CUDA_ALLOWED = {"is_available", "current_device", "device_count", "get_device_properties",
                      "get_device_capability"}
TRITON_ALLOWED = {"jit", "autotune", "heuristics", "Config", "cdiv", "next_power_of_2", "language", "constexpr"}
# Methods a launcher may call: tensor structure (views, allocation, shape queries, copies) and
# plain-Python container/string methods. Anything else (sum, mul, exp, float, item, tolist, ...) is math
# or a host read of tensor values that belongs in the kernel.
LAUNCHER_METHODS = {
    "view", "view_as", "reshape", "reshape_as", "contiguous", "size", "stride", "numel", "dim", "element_size",
    "is_contiguous", "data_ptr", "storage_offset", "new_empty", "new_zeros", "new_empty_strided", "flatten",
    "unflatten", "squeeze", "unsqueeze", "transpose", "permute", "t", "expand", "expand_as", "narrow", "unbind",
    "split", "chunk", "select", "zero_", "copy_", "clone", "detach", "to", "get_device", "is_floating_point",
    "append", "extend", "insert", "get", "items", "keys", "values", "pop", "setdefault", "update", "format",
    "join", "startswith", "endswith", "index", "count",
}
CONVERSIONS = {"float", "half", "bfloat16", "double", "int", "long", "short", "bool", "type", "type_as"}
BANNED_BUILTINS = {"open", "exec", "eval", "compile", "__import__", "getattr", "setattr", "delattr", "globals",
                   "locals", "vars", "breakpoint", "input", "exit", "quit", "help", "memoryview", "type", "dir", "id"}
ALLOWED_DUNDERS = {"__name__", "__doc__", "__file__"}

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


def runtime_violations(ops: dict[str, int]) -> list[str]:
    """The recorded aten ops that are torch math (or dtype conversions) rather than allocation/views."""
    return sorted(f"{name} x{count}" for name, count in ops.items() if name not in RUNTIME_ALLOWED_OPS)


# CPython 3.11's parser is not safe to run from two threads at once (seen here on 3.11.7, with the agent
# judging candidates in parallel threads: "SystemError: AST constructor recursion depth mismatch").
_PARSE_LOCK = threading.Lock()


def parse(source: str, filename: str = "<candidate>") -> ast.Module:
    """The candidate's syntax tree; SyntaxError propagates (it is a compile error, not a policy one)."""
    with _PARSE_LOCK:
        return ast.parse(source, filename=filename)


def scan(tree: ast.Module, target: Target) -> list[str]:
    """Every policy finding, as 'line N: what and what to do instead'; [] when the file is clean."""
    visitor = _Scanner()
    visitor.visit(tree)
    findings = visitor.findings
    findings += _entry_findings(tree, target, visitor)
    if not visitor.kernels:
        findings.append("no @triton.jit kernel: the math must happen in a Triton kernel the entry function launches")
    return sorted(set(findings), key=_line_of)


def _line_of(finding: str) -> tuple[int, str]:
    head = finding.split(":", 1)[0]
    return (int(head.split()[1]), finding) if head.startswith("line ") else (10**9, finding)


def _entry_findings(tree: ast.Module, target: Target, visitor: "_Scanner") -> list[str]:
    entry = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == target.name), None)
    if entry is None:
        return [f"no entry function: define `{target.signature}` at the top level of the file"]
    if entry.name in visitor.kernels:
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


class _Scanner(ast.NodeVisitor):
    def __init__(self):
        self.findings: list[str] = []
        self.aliases: dict[str, str] = {}  # local name -> dotted module or module attribute
        self.kernels: set[str] = set()
        self.in_kernel = False
        self.params: list[set[str]] = []  # parameter names of the enclosing functions (they shadow builtins)

    def flag(self, node: ast.AST, message: str) -> None:
        self.findings.append(f"line {getattr(node, 'lineno', 0)}: {message}")

    # imports -----------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if not _import_allowed(a.name):
                self.flag(node, f"imports `{a.name}` (allowed: {', '.join(ALLOWED_IMPORTS)})")
            self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level or not _import_allowed(module):
            self.flag(node, f"imports from `{'.' * node.level}{module}` (allowed: {', '.join(ALLOWED_IMPORTS)})")
            return
        for a in node.names:
            dotted = f"{module}.{a.name}"
            problem = _dotted_problem(dotted) if a.name != "*" else None
            if problem:
                self.flag(node, problem)
            self.aliases[a.asname or a.name] = dotted

    # definitions -------------------------------------------------------------------------------
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.flag(node, f"defines class `{node.name}`: a kernel file needs none (a tensor subclass can defer "
                        "work past the check)")
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        for d in node.decorator_list:
            self.visit(d)
        self.visit(node.args)  # defaults and annotations belong to the enclosing scope
        is_kernel = any(self._is_jit(d) for d in node.decorator_list)
        if is_kernel:
            self.kernels.add(node.name)
        outer, self.in_kernel = self.in_kernel, self.in_kernel or is_kernel
        self.params.append(_param_names(node.args))
        for child in node.body:
            self.visit(child)
        self.params.pop()
        self.in_kernel = outer

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.visit(node.args)
        self.params.append(_param_names(node.args))
        self.visit(node.body)
        self.params.pop()

    def _is_jit(self, decorator: ast.AST) -> bool:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        return self._resolve(target) in ("triton.jit", "triton.runtime.jit.jit")

    # names and attributes ----------------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        if node.id in BANNED_BUILTINS and not isinstance(node.ctx, ast.Load):
            self.flag(node, f"rebinds the builtin name `{node.id}`")
        elif node.id in BANNED_BUILTINS and node.id not in self.aliases and not any(node.id in p for p in self.params):
            self.flag(node, f"uses `{node.id}` (no file, process, exec or introspection access in a candidate)")
        elif _dunder(node.id) and node.id not in ALLOWED_DUNDERS:
            self.flag(node, f"uses `{node.id}`")
        elif self.in_kernel and self.aliases.get(node.id, "").startswith("torch"):
            self.flag(node, f"uses torch (`{node.id}`) inside a Triton kernel")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if _dunder(node.attr) and node.attr not in ALLOWED_DUNDERS:
            self.flag(node, f"accesses `.{node.attr}` (introspection of objects and modules is not allowed)")
        dotted = self._resolve(node)
        if dotted is None:
            self.generic_visit(node)
            return
        problem = _dotted_problem(dotted)
        if problem:
            self.flag(node, problem)
        if self.in_kernel and dotted.startswith("torch"):
            self.flag(node, f"uses `{dotted}` inside a Triton kernel")
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self.flag(node, f"assigns to `{dotted}` (patching a library)")

    def _resolve(self, node: ast.AST) -> str | None:
        """`tl.load` -> 'triton.language.load' for chains rooted at an imported name, else None."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.aliases:
            return None
        return ".".join([self.aliases[node.id], *reversed(parts)])

    # calls -------------------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if not self.in_kernel and isinstance(func, ast.Attribute) and self._resolve(func) is None:
            self._check_method(node, func.attr)
        self.generic_visit(node)

    def _check_method(self, node: ast.Call, name: str) -> None:
        if name in CONVERSIONS:
            self.flag(node, f"converts a dtype with `.{name}()` outside a kernel: load and convert inside the kernel")
        elif name == "to" and not _device_only(node):
            self.flag(node, "converts a dtype with `.to(...)` outside a kernel: load and convert inside the kernel")
        elif name not in LAUNCHER_METHODS:
            self.flag(node, f"calls `.{name}()` outside a Triton kernel: outside kernels a candidate may only "
                            "allocate, view/reshape, make contiguous and query shapes; the math goes in the kernel")


def _import_allowed(module: str) -> bool:
    return module in ALLOWED_IMPORTS or module.startswith("triton.language.")


def _dotted_problem(dotted: str) -> str | None:
    """Why a dotted name rooted at an allowed module is not allowed, or None."""
    parts = dotted.split(".")
    if parts[0] == "torch" and len(parts) > 1:
        if parts[1] not in TORCH_ALLOWED or (parts[1] == "cuda" and len(parts) > 2
                                              and parts[2] not in TORCH_CUDA_ALLOWED):
            return (f"uses `{dotted}`: outside kernels only torch.empty*/zeros*, dtypes and device queries are "
                    "allowed; do the math in Triton")
    if parts[0] == "triton" and len(parts) > 1 and parts[1] not in TRITON_ALLOWED:
        return f"uses `{dotted}` (allowed from triton: {', '.join(sorted(TRITON_ALLOWED))})"
    return None


def _param_names(args: ast.arguments) -> set[str]:
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    return {a.arg for a in every if a is not None}


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _device_only(call: ast.Call) -> bool:
    """`.to(x.device)`, `.to("cuda")`, `.to(device=...)`: a move, not a conversion."""
    if any(k.arg not in ("device", "non_blocking") for k in call.keywords):
        return False
    for a in call.args:
        is_device = (isinstance(a, ast.Attribute) and a.attr == "device") or (
            isinstance(a, ast.Constant) and isinstance(a.value, str))
        if not is_device:
            return False
    return True

