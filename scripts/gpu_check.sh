#!/usr/bin/env bash
# The prepared GPU check: every GPU path of autotune once, in under 8 minutes on one H100/H200-class GPU.
# Writes benchmarks/<date>-<gpu>.md (the page), .json (raw figures) and selfcheck.log (every command).
#
#   scripts/gpu_check.sh [selfcheck options]      # after the README's install, on any CUDA machine
#   scripts/gpu_check.sh --dry-run                # the same code on the CPU, small sizes (the test suite runs it)
#
# On a machine without this project's dependencies (the lent device image has torch and triton, not hydra
# or gitpython), run scripts/gpu_wheels.sh first where pip can download; the wheels in .whl/ are installed
# here into /tmp/site. When $OUT is set (the device tool's result folder) the results are copied there.
set -uo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if ls .whl/*.whl >/dev/null 2>&1; then
  "$python" -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# Candidates run in `python -I` children, which ignore PYTHONPATH: make autotune (and /tmp/site) importable
# through a .pth file when it is not installed.
if ! "$python" -I -c "import autotune" 2>/dev/null; then
  site=$("$python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  printf '%s\n/tmp/site\n' "$PWD" > "$site/autotune-selfcheck.pth" || { echo "cannot write $site"; exit 2; }
fi
"$python" -m autotune.selfcheck "$@"
status=$?
if [ -n "${OUT:-}" ]; then  # the page, the figures and the log come back; the work folder stays
  out=benchmarks args=("$@")
  for ((i = 0; i < ${#args[@]} - 1; i++)); do [ "${args[i]}" = --out ] && out=${args[i+1]}; done
  cp "$out"/*.md "$out"/*.json "$out"/selfcheck.log "$OUT"/
fi
exit $status
