#!/usr/bin/env bash
# Download, here, the wheels that the lent GPU machine's image lacks (it has torch, triton, pandas, rich,
# jinja2, matplotlib, safetensors, pytest; Python 3.12, x86-64) into .whl/, which scripts/gpu_check.sh
# installs there. Carry .whl with the call (it is ignored by git through .git/info/exclude).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
           --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform any)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
  -d .whl hydra-core omegaconf antlr4-python3-runtime==4.9.3 gitpython gitdb smmap openai distro jiter \
  pydantic pydantic-core annotated-types typing-inspection sniffio nsight-python liger-kernel
ls .whl
