"""A merged fused_moe kernel as vLLM's own tuned configuration file, when it is a configuration of vLLM's kernel.

The search agent's fused_moe template is vLLM's Triton fused MoE (tokens sorted by expert and padded to
BLOCK_SIZE_M, tiles of BLOCK_SIZE_N x BLOCK_SIZE_K, GROUP_SIZE_M); a kernel rendered from it is fully described
by its six knobs, and vLLM tunes its own kernel by the same six, per GPU and per (experts, intermediate size),
in `E={E},N={N},device_name={device}.json` files that map a batch size to a configuration (vLLM 0.32:
`get_config_file_name` and `get_moe_configs` in vllm/model_executor/layers/fused_moe/fused_moe.py; a folder named
by VLLM_TUNED_CONFIG_FOLDER is read before vLLM's own configs/). Such a winner goes back as that file: vLLM's
kernel runs with it, nothing of ours runs. Any other fused_moe kernel goes back as a kernel (the plugin's
out-of-tree fused-MoE method).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

TEMPLATE_MARK = "fused_moe, written by the `search` baseline from a template:"
KNOBS = {"BLOCK_M": "BLOCK_SIZE_M", "BLOCK_N": "BLOCK_SIZE_N", "BLOCK_K": "BLOCK_SIZE_K", "GROUP_M": "GROUP_SIZE_M",
         "NUM_WARPS": "num_warps", "NUM_STAGES": "num_stages"}
# the batch sizes vLLM's own tuned files list (benchmarks/kernels/benchmark_moe.py's default grid)
BATCH_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)


def vllm_config(source: str) -> dict[str, int] | None:
    """vLLM's configuration dict for a kernel rendered from our fused_moe template, else None."""
    tree = ast.parse(source)
    doc = ast.get_docstring(tree) or ""
    if not doc.startswith(TEMPLATE_MARK):
        return None
    found = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in KNOBS and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, int)):
            found[KNOBS[node.targets[0].id]] = int(node.value.value)
    return found if len(found) == len(KNOBS) else None


def device_file_name(gpu: str) -> str:
    """vLLM's get_device_name_as_file_name and its H200 rule: 'NVIDIA H100 80GB HBM3' -> 'NVIDIA_H100_80GB_HBM3'."""
    name = re.sub(r"[\s/]+", "_", gpu)
    return "NVIDIA_H200" if "H200" in name.split("_") else name


def config_files(source: str, provenance: dict[str, Any]) -> tuple[dict[str, dict], str]:
    """(file name -> JSON content, why none) for a merged fused_moe kernel: one file per (E, N) the kernel was
    profiled on, its configuration at every batch size (the profiled ones and vLLM's grid)."""
    config = vllm_config(source)
    if config is None:
        return {}, "not a configuration of vLLM's Triton fused MoE (exported as a kernel instead)"
    gpu = (provenance.get("environment") or {}).get("gpu")
    if not gpu:
        return {}, "judged without a GPU: a tuned configuration names the GPU it was timed on"
    shapes = [s["shape"] for s in ((provenance.get("hotspot") or {}).get("shapes") or [])]
    by_file: dict[str, set[int]] = {}
    for tokens, experts, _, _, inter in (tuple(s) for s in shapes if len(s) == 5):
        by_file.setdefault(f"E={experts},N={inter},device_name={device_file_name(gpu)}.json", set()).add(int(tokens))
    if not by_file:
        return {}, "no profiled shapes in its provenance: the file is named after the experts and width"
    return {name: {str(m): dict(config) for m in sorted(set(BATCH_SIZES) | seen)} for name, seen in by_file.items()}, ""


def write_config_files(source: str, provenance: dict[str, Any], folder: Path) -> tuple[list[str], str]:
    files, why = config_files(source, provenance)
    if files:
        folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (folder / name).write_text(json.dumps(content, indent=4) + "\n")
    return sorted(files), why
