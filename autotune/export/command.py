"""Take the merged kernels out to the engines users serve with: a vLLM plugin, or a transformers patch.

`autotune export vllm [--out DIR]` writes a pip-installable vLLM plugin (default DIR: autotune-vllm-kernels/):
the best merged kernel per target from `kernels.dir` (rms_norm, fused_add_rms_norm, rotary_embedding,
silu_and_mul), registered in every vLLM process through the entry point group `vllm.general_plugins`:
rms_norm and fused_add_rms_norm as the vLLM IR provider "autotune" (`register_impl`) where the installed
vLLM has vLLM IR, else as out-of-tree `RMSNorm`; rotary and SiLU-and-mul as out-of-tree `CustomOp`s.
Install it into vLLM's environment (`pip install DIR`) and select the IR implementations with the printed
`--ir-op-priority`; the out-of-tree ops apply by themselves.

`autotune export hf [--out DIR]` writes the package `autotune_hf_kernels` (default DIR: autotune-hf-kernels/):
`from autotune_hf_kernels import apply_autotune_kernels; apply_autotune_kernels(model)` patches a
transformers Llama-style model's RMSNorm modules, MLPs (SiLU and mul) and rotary function, as Liger-Kernel does.

The kernels are Triton: they need a CUDA GPU, or the Triton interpreter on the CPU (TRITON_INTERPRET=1).
Settings: kernels.dir=PATH (default kernels/).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from autotune.errors import UserError
from autotune.export.bundle import HF, VLLM, ExportedPackage, write_package

IR_TARGETS = ("rms_norm", "fused_add_rms_norm")  # the targets vLLM IR has ops for

USAGE = "autotune export vllm|hf [--out DIR] [key=value ...]"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, our format
        raise UserError(f"{message} (usage: autotune export vllm|hf [--out DIR])")


def main(argv: list[str]) -> int:
    """The command's entry (every command's is `main(argv)` in its stage's command.py)."""
    from autotune.config import from_argv

    cfg, args = from_argv(argv)
    parser = _Parser(prog="autotune export", add_help=False)
    parser.add_argument("engine", choices=("vllm", "hf"))
    parser.add_argument("--out", default=None)
    ns = parser.parse_args(args)
    kind = VLLM if ns.engine == "vllm" else HF
    out = Path(ns.out or kind.package.replace("_", "-"))
    exported = write_package(kind, str(cfg.kernels.dir), out)
    print(f"wrote {exported.out}/ ({exported.package}): " +
          ", ".join(f"{t} {k}" for t, k in exported.kernels.items()))
    for target, why in exported.skipped.items():
        print(f"not exported: {target} ({why})")
    print(vllm_instructions(exported) if ns.engine == "vllm" else hf_instructions(exported))
    return 0


def ir_op_priority(exported: ExportedPackage) -> str:
    """The --ir-op-priority value that selects the plugin's IR implementations ('' when it has none)."""
    chosen = {t: ["autotune"] for t in IR_TARGETS if t in exported.kernels}
    return json.dumps(chosen) if chosen else ""


def vllm_instructions(exported: ExportedPackage) -> str:
    lines = [f"install it where vLLM is installed:  pip install {exported.out.resolve()}"]
    priority = ir_op_priority(exported)
    if priority:
        lines.append(f"select its RMSNorm kernels (vLLM with vLLM IR):  vllm serve MODEL --ir-op-priority '{priority}'")
        lines.append("  (vLLM without vLLM IR uses them as an out-of-tree RMSNorm, no flag needed)")
    replaced = {"rotary_embedding": "RotaryEmbedding", "silu_and_mul": "SiluAndMul"}
    oot = [f"{t} replaces vLLM's {cls}" for t, cls in replaced.items() if t in exported.kernels]
    if oot:
        lines.append("; ".join(oot) + " by itself (out-of-tree CustomOp)")
    if "paged_attention" in exported.kernels:
        lines.append("select its attention backend (paged_attention):  vllm serve MODEL --attention-backend CUSTOM  "
                     "(a GPU build: vLLM's CPU platform takes no backend but its own CPU_ATTN)")
    lines.append("VLLM_PLUGINS=autotune_kernels limits vLLM's plugins to this one")
    lines.append("the kernels are Triton: a CUDA GPU, or TRITON_INTERPRET=1 on the CPU (slow; for testing)")
    return "\n".join(lines)


def hf_instructions(exported: ExportedPackage) -> str:
    return (f"install it:  pip install {exported.out.resolve()}\n"
            f"use it:      from {exported.package} import apply_autotune_kernels; apply_autotune_kernels(model)\n"
            "the kernels are Triton: a CUDA GPU, or TRITON_INTERPRET=1 on the CPU (slow; for testing)")
