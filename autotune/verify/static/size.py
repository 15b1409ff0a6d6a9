"""Bounds on a candidate's size, checked before any other work is done on it: its bytes before it is parsed, its
syntax tree's depth and node count before it is scanned (the scan and the loader walk the tree recursively; a
400-term `1+1+...` was enough to crash them). Every walk here is iterative. The defaults (conf/verify/default.yaml)
are far above any honest kernel's: the project's own examples and search templates stay under 11 kB, a depth of
17 and 3,000 nodes."""

from __future__ import annotations

import ast
import dataclasses
import re

from autotune.sandbox.limits import positive
from autotune.verify.verdict import INVISIBLE


@dataclasses.dataclass(frozen=True)
class SourceLimits:
    """The checker's bounds on a candidate file: checked by the judge before it parses and scans the file, and
    again by the device process (which gets them with the source) before it builds the kernels; the constant
    bounds are the device loader's (autotune.verify.device.loader.constant)."""

    max_bytes: int
    max_depth: int
    max_nodes: int
    max_constant_bits: int  # the largest integer a constant expression may compute
    max_constant_items: int  # the longest string or tuple

    @classmethod
    def from_config(cls, cfg_verify) -> SourceLimits:
        return cls(max_bytes=positive(cfg_verify, "max_source_kb", int) * 1024,
                   max_depth=positive(cfg_verify, "max_tree_depth", int),
                   max_nodes=positive(cfg_verify, "max_tree_nodes", int),
                   max_constant_bits=positive(cfg_verify, "max_constant_bits", int),
                   max_constant_items=positive(cfg_verify, "max_constant_items", int))

    def to_wire(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_wire(cls, d: dict) -> SourceLimits:
        return cls(**{f.name: int(d[f.name]) for f in dataclasses.fields(cls)})


# Characters that make code read otherwise than it runs ("Trojan Source", CVE-2021-42574): a reviewer reads the
# source on the evidence page.
_HIDDEN = re.compile(f"[{INVISIBLE}]")


def source_problem(source: str, limits: SourceLimits) -> str:
    """Why the source is refused before it is parsed: too large, or characters a reader does not see ('' when
    neither)."""
    if len(source) > limits.max_bytes or len(source.encode("utf-8", "surrogatepass")) > limits.max_bytes:
        return (f"the file is over the checker's limit of {limits.max_bytes // 1024} kB (verify.max_source_kb): a "
                "kernel file needs no large data; compute tables in the kernel")
    hidden = _HIDDEN.search(source)
    if hidden:
        line = source.count("\n", 0, hidden.start()) + 1
        return (f"line {line}: the character U+{ord(hidden.group()):04X}, which reads otherwise than it runs "
                "(a control, bidirectional or zero-width character): write the file in plain characters")
    return ""


def tree_problem(tree: ast.AST, limits: SourceLimits) -> str:
    """Why the syntax tree is too deep or too large to scan ('' when it is not); stops at the first bound passed."""
    stack, nodes = [(tree, 1)], 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if depth > limits.max_depth:
            line = getattr(node, "lineno", "?")
            return (f"line {line}: expressions nested over {limits.max_depth} deep (verify.max_tree_depth): "
                    "split them into named steps")
        if nodes > limits.max_nodes:
            return (f"the file has over {limits.max_nodes} syntax-tree nodes (verify.max_tree_nodes): a kernel file "
                    "needs no large literals or generated code")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return ""
