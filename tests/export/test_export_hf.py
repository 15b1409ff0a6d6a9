"""`autotune export hf`: apply_autotune_kernels on a tiny random transformers Llama gives the same greedy tokens,
and the patched modules really run the kernels. Runs in a subprocess so that triton is first imported with the
Triton interpreter on (no GPU here)."""

import json
import os
import subprocess
import sys

import pytest

from autotune import cli

pytest.importorskip("transformers")

SCRIPT = r"""
import json, sys, collections, torch
from transformers import LlamaConfig, LlamaForCausalLM
sys.path.insert(0, sys.argv[1])
import autotune_hf_kernels as hf

torch.manual_seed(0)
config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, max_position_embeddings=256, rope_theta=10000.0, tie_word_embeddings=False)
model = LlamaForCausalLM(config).eval()
prompt = torch.randint(0, 128, (2, 7), generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    plain_logits = model(prompt).logits
    plain = model.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)

calls = collections.Counter()
def counted(name, fn):
    def run(*args):
        calls[name] += 1
        return fn(*args)
    return run
kernels = {name: counted(name, fn) for name, fn in hf.bundled_kernels().items()}
patched = hf.apply_autotune_kernels(model, kernels)
with torch.no_grad():
    ours_logits = model(prompt).logits
    ours = model.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
hf.remove_autotune_kernels(model)
with torch.no_grad():
    restored = model(prompt).logits
print(json.dumps({"patched": patched, "calls": calls, "same_tokens": torch.equal(plain, ours),
                  "new_tokens": ours.shape[1] - prompt.shape[1],
                  "logits_err": (ours_logits - plain_logits).abs().max().item(),
                  "restored_err": (restored - plain_logits).abs().max().item()}))
"""


@pytest.mark.slow  # ~20 s of CPU: the Triton interpreter runs every kernel call
def test_patched_tiny_llama_runs_the_kernels_and_decodes_the_same_tokens(kernels_dir, tmp_path, capsys):
    out = tmp_path / "hf"
    assert cli.main(["export", "hf", "--out", str(out), f"kernels.dir={kernels_dir}"]) == 0
    printed = capsys.readouterr().out
    assert "apply_autotune_kernels(model)" in printed and "not exported: fused_add_rms_norm" in printed
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(out)], capture_output=True, text=True, env=env,
                          timeout=280, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # 2 layers x 2 norms + the final norm; 2 MLPs; one rotary function for the modelling module
    assert result["patched"] == {"rms_norm": 5, "silu_and_mul": 2, "rotary_embedding": 1}
    assert result["same_tokens"] and result["new_tokens"] == 8
    assert result["logits_err"] < 1e-4 and result["restored_err"] == 0.0
    # one forward + 8 decode steps (the first generate step is the prompt) = 9 forwards with the patch
    forwards = 1 + 8
    assert result["calls"] == {"rms_norm": 5 * forwards, "silu_and_mul": 2 * forwards,
                               "rotary_embedding": 2 * forwards}  # q and k together in each of 2 layers
