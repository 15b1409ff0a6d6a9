"""Exporting the MoE and paged-attention winners: vLLM's own tuned-configuration file (read back by the real vLLM's
get_moe_configs), the plugin's out-of-tree fused-MoE method and CUSTOM attention backend in vLLM's registries
(a CPU build of vLLM refuses every attention backend but its own: checked and said), the transformers patch of the
MoE experts (tiny Qwen3MoeForCausalLM and MixtralForCausalLM decode the same greedy tokens through the kernel), and
the Hugging Face `kernels` library's route (kernelize with a local repository).

The vLLM checks need a Python with vLLM (VLLM_PYTHON=/path/to/python, as tests/export/test_export_vllm.py); the
transformers ones run the Triton interpreter in a child process.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autotune import cli
from autotune.agent import search
from autotune.export import vllm_moe

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "autotune" / "targets" / "examples"
H100 = "NVIDIA H100 80GB HBM3"


def _vllm_python() -> str | None:
    if os.environ.get("VLLM_PYTHON"):
        return os.environ["VLLM_PYTHON"]
    return sys.executable if importlib.util.find_spec("vllm") else None


def _merged(root: Path, target: str, source: str, provenance: dict) -> None:
    folder = root / target / "k1"
    folder.mkdir(parents=True)
    (folder / "kernel.py").write_text(source)
    (folder / "provenance.json").write_text(json.dumps({"target": target, "created_at": "2026-12-01T09:00:00+00:00",
                                                         **provenance}))


TUNED = {"verdict": {"status": "accepted", "measured": True, "speedup_geomean": 1.2},
         "environment": {"gpu": H100, "device": "cuda"},
         "hotspot": {"shapes": [{"shape": [4, 128, 8, 2048, 768], "dtype": "bfloat16", "calls": 96},
                                {"shape": [512, 128, 8, 2048, 768], "dtype": "bfloat16", "calls": 4}]}}


def test_a_template_winner_is_vllms_configuration_file_and_any_other_kernel_is_not():
    source = search.render("fused_moe", search.search_space("fused_moe")[1])
    files, why = vllm_moe.config_files(source, TUNED)
    assert why == "" and list(files) == ["E=128,N=768,device_name=NVIDIA_H100_80GB_HBM3.json"]
    table = files["E=128,N=768,device_name=NVIDIA_H100_80GB_HBM3.json"]
    assert {"1", "4", "512", "4096"} <= set(table)
    assert table["4"] == {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
                          "num_warps": 4, "num_stages": 3}
    assert vllm_moe.device_file_name("NVIDIA H200 NVL") == "NVIDIA_H200"
    assert vllm_moe.config_files((EXAMPLES / "fused_moe.py").read_text(), TUNED)[1].startswith("not a configuration")
    assert "without a GPU" in vllm_moe.config_files(source, {"environment": {"gpu": None}})[1]


def _export_vllm(tmp_path, kernels: Path, capsys) -> Path:
    out = tmp_path / "plugin"
    assert cli.main(["export", "vllm", "--out", str(out), f"kernels.dir={kernels}"]) == 0
    capsys.readouterr()
    site = tmp_path / "site"
    shutil.copytree(out / "autotune_vllm_kernels", site / "autotune_vllm_kernels")  # what pip installs
    return site


VLLM_CONFIG = r"""
import json, os, sys
import autotune_vllm_kernels as plugin
registered = plugin.register()
from vllm.model_executor.layers.fused_moe import fused_moe as fm
fm.get_device_name_as_file_name = lambda device_id=0: "NVIDIA_H100_80GB_HBM3"  # the GPU it was tuned on
configs = fm.get_moe_configs(128, 768, None)
chosen = fm.try_get_optimal_moe_config((128, 1536, 2048), (128, 2048, 768), 8, None, 5)
print(json.dumps({"registered": registered, "folder": os.environ.get("VLLM_TUNED_CONFIG_FOLDER"),
                  "batches": sorted(configs), "chosen": chosen}))
"""


@pytest.mark.skipif(_vllm_python() is None, reason="no Python with vLLM (set VLLM_PYTHON=/path/to/python)")
def test_vllm_reads_the_exported_configuration_through_its_own_lookup(tmp_path, capsys):
    kernels = tmp_path / "kernels"
    _merged(kernels, "fused_moe", search.render("fused_moe", search.search_space("fused_moe")[1]), TUNED)
    site = _export_vllm(tmp_path, kernels, capsys)
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("VLLM_TUNED_CONFIG_FOLDER", None)
    done = subprocess.run([_vllm_python(), "-c", VLLM_CONFIG], capture_output=True, text=True, env=env, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["folder"] == str(site / "autotune_vllm_kernels" / "moe_configs")
    assert "tuned configurations" in result["registered"]["fused_moe"]
    assert 4 in result["batches"] and 512 in result["batches"]
    assert result["chosen"]["BLOCK_SIZE_N"] == 64 and result["chosen"]["BLOCK_SIZE_K"] == 128


VLLM_REGISTRIES = r"""
import json, types, torch
import autotune_vllm_kernels as plugin
registered = plugin.register()
from vllm.model_executor.custom_op import op_registry_oot
from vllm.v1.attention.backends.registry import AttentionBackendEnum
from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend
from vllm.platforms.cpu import CpuPlatform
method = op_registry_oot["UnquantizedFusedMoEMethod"]
backend = AttentionBackendEnum.CUSTOM.get_class()
selected = CpuPlatform.get_attn_backend_cls(AttentionBackendEnum.CUSTOM,
                                            types.SimpleNamespace(use_sparse=False, use_mla=False))
# the out-of-tree method's forward on a layer laid out as vLLM's FusedMoE holds it
torch.manual_seed(0)
e, k, h, i, t = 8, 2, 64, 32, 5
layer = types.SimpleNamespace(w13_weight=torch.randn(e, 2 * i, h) / 8, w2_weight=torch.randn(e, h, i) / 6,
                              activation="silu", expert_map=None, apply_router_weight_on_input=False, w13_bias=None)
x = torch.randn(t, h)
weights, ids = torch.softmax(torch.randn(t, e), -1).topk(k)
out = method._autotune(None, layer, x, weights, ids)
ref = torch.zeros(t, h)
for tok in range(t):
    for j in range(k):
        g, u = (layer.w13_weight[ids[tok, j]] @ x[tok]).chunk(2)
        ref[tok] += weights[tok, j] * (layer.w2_weight[ids[tok, j]] @ (torch.nn.functional.silu(g) * u))
print(json.dumps({"registered": registered, "method": method.__name__, "bases": [b.__name__ for b in method.__mro__],
                  "backend": backend.__name__, "triton": issubclass(backend, TritonAttentionBackend),
                  "name": backend.get_name(), "cpu_selects": selected, "moe_err": (out - ref).abs().max().item()}))
"""


@pytest.mark.slow  # ~1 min: importing vLLM, and the kernel under the Triton interpreter
@pytest.mark.skipif(_vllm_python() is None, reason="no Python with vLLM (set VLLM_PYTHON=/path/to/python)")
def test_the_kernels_register_in_vllms_moe_and_attention_registries(tmp_path, capsys):
    kernels = tmp_path / "kernels"
    _merged(kernels, "fused_moe", (EXAMPLES / "fused_moe.py").read_text(), {"verdict": {"status": "unmeasured"}})
    _merged(kernels, "paged_attention", (EXAMPLES / "paged_attention.py").read_text(),
            {"verdict": {"status": "unmeasured"}})
    site = _export_vllm(tmp_path, kernels, capsys)
    env = {**os.environ, "PYTHONPATH": str(site), "TRITON_INTERPRET": "1"}
    done = subprocess.run([_vllm_python(), "-c", VLLM_REGISTRIES], capture_output=True, text=True, env=env,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["registered"] == {"fused_moe": "CustomOp.register_oot UnquantizedFusedMoEMethod",
                                    "paged_attention": "attention backend CUSTOM (--attention-backend CUSTOM)"}
    assert result["method"] == "AutotuneFusedMoEMethod" and "UnquantizedFusedMoEMethod" in result["bases"]
    assert result["backend"] == "AutotuneAttentionBackend" and result["triton"] and result["name"] == "CUSTOM"
    # vLLM's CPU platform refuses a GPU backend: it selects its own CPU_ATTN whatever is asked
    assert result["cpu_selects"].endswith("cpu_attn.CPUAttentionBackend")
    assert result["moe_err"] < 1e-4


HF_MOE = r"""
import collections, json, sys, torch, transformers
sys.path.insert(0, sys.argv[1])
import autotune_hf_kernels as hf
out = {}
for prefix, extra in (("Qwen3Moe", {"num_experts": 4, "moe_intermediate_size": 16, "norm_topk_prob": False}),
                      ("Mixtral", {"num_local_experts": 4})):
    config = getattr(transformers, prefix + "Config")(vocab_size=64, hidden_size=32, intermediate_size=16,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_experts_per_tok=2, **extra)
    torch.manual_seed(0)
    model = getattr(transformers, prefix + "ForCausalLM")(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1 + 0.1 * torch.randn(p.shape) if name.endswith("norm.weight") else torch.randn(p.shape) * p.shape[-1] ** -0.5)
    prompt = torch.randint(0, 64, (2, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        plain = model.generate(prompt, max_new_tokens=4, do_sample=False, pad_token_id=0)
    calls = collections.Counter()
    fused = hf.bundled_kernels()["fused_moe"]
    def counted(*args):
        calls["fused_moe"] += 1
        return fused(*args)
    patched = hf.apply_autotune_kernels(model, {"fused_moe": counted})
    with torch.no_grad():
        ours = model.generate(prompt, max_new_tokens=4, do_sample=False, pad_token_id=0)
    hf.remove_autotune_kernels(model)
    out[prefix] = {"patched": patched, "calls": calls["fused_moe"], "same": torch.equal(plain, ours),
                   "distinct": len(set(plain[:, 6:].flatten().tolist()))}
print(json.dumps(out))
"""


@pytest.fixture
def hf_package(tmp_path, capsys):
    kernels = tmp_path / "kernels"
    _merged(kernels, "fused_moe", (EXAMPLES / "fused_moe.py").read_text(), {"verdict": {"status": "unmeasured"}})
    _merged(kernels, "rms_norm", (EXAMPLES / "rms_norm.py").read_text(), {"verdict": {"status": "unmeasured"}})
    out = tmp_path / "hf"
    assert cli.main(["export", "hf", "--out", str(out), f"kernels.dir={kernels}"]) == 0
    capsys.readouterr()
    return out


@pytest.mark.slow  # ~30 s: the fused MoE kernel under the Triton interpreter, 2 models x 4 decode steps
def test_patched_transformers_moe_models_decode_the_same_tokens_through_the_kernel(hf_package, tmp_path):
    done = subprocess.run([sys.executable, "-c", HF_MOE, str(hf_package)], capture_output=True, text=True,
                          env={**os.environ, "TRITON_INTERPRET": "1"}, timeout=400, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for family in ("Qwen3Moe", "Mixtral"):
        r = result[family]
        assert r["patched"] == {"fused_moe": 2} and r["same"] and r["distinct"] >= 2, (family, r)
        assert r["calls"] == 2 * 4  # 2 sparse layers x (the prompt's forward and 3 decode steps)


KERNELIZE = r"""
import json, sys, torch, transformers
sys.path.insert(0, sys.argv[1])
import autotune_hf_kernels as hf
from kernels import Mode, kernelize, register_kernel_mapping, replace_kernel_forward_from_hub
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeRMSNorm
# transformers 5.24+ hands its @use_kernel_forward_from_hub layers to kernels 0.18.2 to 0.19 (5.25 requires 0.19.1);
# with an older kernels its decorator is inert, so the layer class is marked here as transformers would have marked it
by_transformers = getattr(Qwen3MoeRMSNorm, "kernel_layer_name", None) == "RMSNorm"
if not by_transformers:
    replace_kernel_forward_from_hub(Qwen3MoeRMSNorm, "RMSNorm")
repo = hf.kernels_repository(sys.argv[2])
register_kernel_mapping(hf.autotune_kernel_mapping(repo, "cpu"))
config = transformers.Qwen3MoeConfig(vocab_size=64, hidden_size=32, intermediate_size=16, num_hidden_layers=1,
    num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_experts=4, num_experts_per_tok=2,
    moe_intermediate_size=16)
torch.manual_seed(0)
model = transformers.Qwen3MoeForCausalLM(config).eval()
prompt = torch.randint(0, 64, (1, 5))
with torch.no_grad():
    plain = model(prompt).logits
# the README's call: layers the package has no kernel for (transformers 5.25 also marks the rotary embedding) keep their
# own forward; the file check below says the RMSNorm layer is the package's
kernelize(model, mode=Mode.INFERENCE, device="cpu")
with torch.no_grad():
    ours = model(prompt).logits
norm = model.model.norm
forward = norm.forward.__func__  # kernelize binds the layer's forward to each module
print(json.dumps({"file": forward.__code__.co_filename, "err": (ours - plain).abs().max().item(),
                  "by_transformers": by_transformers}))
"""


@pytest.mark.slow  # ~20 s: importing kernels and transformers, RMSNorm under the Triton interpreter
def test_the_kernels_library_loads_the_package_as_a_local_repository(hf_package, tmp_path):
    pytest.importorskip("kernels")
    done = subprocess.run([sys.executable, "-c", KERNELIZE, str(hf_package), str(tmp_path / "repo")],
                          capture_output=True, text=True, env={**os.environ, "TRITON_INTERPRET": "1"}, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert "build/torch-cpu/autotune_kernels/layers.py" in result["file"]  # kernelize put our layer in place
    assert result["err"] < 1e-5
