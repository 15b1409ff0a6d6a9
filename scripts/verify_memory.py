"""Peak memory of the checker on honest kernels and on the bounds' attacks (issue 28): the judge (`autotune verify`'s
own maximum RSS, from /usr/bin/time) and its sandboxed processes (the largest RSS of any process under a private uid,
polled from /proc every 20 ms while it runs). Prints one line per file; needs root for the private uids.

    python scripts/verify_memory.py                      # default plan, float32/bf16/fp16, ~3 min on 2 cores
    python scripts/verify_memory.py verify=quick         # extra overrides go to every `autotune verify`
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "autotune" / "targets" / "examples"


def attacks(folder: Path) -> list[tuple[str, Path]]:
    """rms_norm's example with an attack appended or spliced in: what each bound stops."""
    honest = (EXAMPLES / "rms_norm.py").read_text()
    made = {
        "16 MB of constants": honest + "\nTABLE = (" + ", ".join(map(str, range(2_000_000))) + ")\n",
        "a 3000-term sum": honest + "\nX = " + "+".join(["1"] * 3000) + "\n",
        "a 400-term sum": honest + "\nX = " + "+".join(["1"] * 400) + "\n",
        "chained **": honest + "\nA = 10 ** 64\nB = A ** 64\nC = B ** 64\nD = C ** 64\nE = D ** 64\n",
        "default tuple(range(40M))": honest.replace("SINGLE_PASS: tl.constexpr,\n",
                                                    "SINGLE_PASS: tl.constexpr, Z=tuple(range(40_000_000)),\n", 1),
    }
    out = []
    for i, (name, text) in enumerate(made.items()):
        path = folder / f"attack{i}.py"
        path.write_text(text)
        out.append((name, path))
    return out


def sandboxed_rss_kb() -> int:
    peak = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            if int(fields["Uid"].split()[0]) >= 200_000:
                peak = max(peak, int(fields.get("VmRSS", "0 kB").split()[0]))
        except (OSError, KeyError, ValueError):
            continue
    return peak


def measure(name: str, target: str, path: Path, overrides: list[str]) -> None:
    peak, done = [0], threading.Event()

    def poll() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], sandboxed_rss_kb())
            time.sleep(0.02)

    poller = threading.Thread(target=poll)
    poller.start()
    run = subprocess.run(["/usr/bin/time", "-f", "%M", "autotune", "verify", target, str(path), "--json",
                          "device=cpu", "verify.shapes=default", "verify.timeout_s=30", *overrides],
                         capture_output=True, text=True)
    done.set()
    poller.join()
    judge_kb = int(run.stderr.strip().splitlines()[-1])
    try:
        verdict = json.loads(run.stdout)
        said = f"{verdict.get('status', verdict.get('error'))}: {(verdict.get('reason') or '')[:90]}"
    except ValueError:
        said = run.stdout[-200:]
    print(f"{name:28s} judge {judge_kb / 1024:5.0f} MB  sandboxed {peak[0] / 1024:5.0f} MB  {said}", flush=True)


def main() -> None:
    overrides = sys.argv[1:]
    for target in ("rms_norm", "paged_attention", "fused_moe"):
        measure(f"{target} example", target, EXAMPLES / f"{target}.py", overrides)
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in attacks(Path(tmp)):
            measure(name, "rms_norm", path, overrides)


if __name__ == "__main__":
    main()
