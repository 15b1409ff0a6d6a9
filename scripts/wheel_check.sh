#!/usr/bin/env bash
# A regular install, as a user on a GPU cluster makes it: build the wheel, install it into a fresh venv that
# never sees the checkout, and from an empty folder run the help, the resolved config and the checker on a
# shipped example kernel. Needs what the README's install needs (torch==2.13.0 from the local index or PyPI).
#
#   scripts/wheel_check.sh            # ~1 min on 2 cores after the wheels are cached; prints "wheel check: ok"
#   KEEP=1 scripts/wheel_check.sh     # keep the scratch folder (its path is printed) to look around
set -euo pipefail
checkout=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d /tmp/autotune-wheel.XXXXXX)
[[ ${KEEP:-} ]] || trap 'rm -rf "$scratch"' EXIT
echo "wheel check in $scratch"

python3 -m venv "$scratch/venv"
"$scratch/venv/bin/pip" install --quiet torch==2.13.0
"$scratch/venv/bin/pip" wheel --quiet --no-deps -w "$scratch/dist" "$checkout"  # an isolated build, as pip does
"$scratch/venv/bin/pip" install --quiet "$scratch"/dist/autotune-*.whl

mkdir "$scratch/empty" && cd "$scratch/empty"
export PATH="$scratch/venv/bin:$PATH"
run() { echo "+ $*" >&2; "$@"; }
# the installed package, not the checkout: the venv's own site-packages
run python -c "import autotune, sys; p = autotune.__file__; print(p); sys.exit('$checkout' in p)"
run autotune --help > help.txt && grep -q "model=" help.txt        # the presets listed: the config was found
run autotune run --cfg job > job.yaml && grep -q "^agent:" job.yaml && grep -q "^verify:" job.yaml
example=$(python -c "from autotune import targets; print(targets.get('rms_norm').example_path)")
run autotune verify rms_norm "$example" verify=quick verify.shapes=default verify.dtypes=[float32] --json > verdict.json
python - <<'EOF'
import json
v = json.load(open("verdict.json"))
assert v["status"] in ("unmeasured", "accepted"), v["reason"]
print(f"verify of the shipped example: {v['status']} ({len(v['cases'])} cases)")
EOF
[[ -z "$(ls -A . | grep -v -e help.txt -e job.yaml -e verdict.json)" ]] || { ls -A; echo "left files behind"; exit 1; }
echo "wheel check: ok"
