"""The judge's peak memory per candidate: an honest one, and each way of flooding the judge (issue 17).

    python scripts/judge_memory.py            # every scenario, each judged in a fresh process
    python scripts/judge_memory.py honest     # one

Each scenario runs `judge(...)` (verify=quick, rms_norm) in a process of its own and prints the rise of that
process's peak RSS (ru_maxrss) over its peak after the imports, with the verdict. The flooding candidates are
tests/verify/candidates/exec_hole.py with an attack in ATTACK, judged with the static scan off (it would refuse
them): they write forged frames straight into the result pipe, whose number is in sys.argv.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = ROOT / "tests" / "verify" / "candidates"

_PIPE = """
import io, os, struct, sys, zipfile, torch
fd = int(sys.argv[sys.argv.index("--sandbox-fds") + 1].split(",")[1])
def send(data):
    data = struct.pack("<Q", len(data)) + data
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
def saved(obj):
    buf = io.BytesIO(); torch.save(obj, buf); return buf.getvalue()
"""
ATTACKS = {
    "deep nesting (a list 50,000 deep, a tuple key 10^6 deep)": _PIPE + """
for pkl in (b"\\x80\\x02" + b"]" * 50_000 + b"a" * 49_999 + b".", b"\\x80\\x02}N" + b"\\x85" * 1_000_000 + b"K\\x01s."):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", pkl)
    send(buf.getvalue())
""",
    "14 error frames of 10 MiB": _PIPE + """
frame = saved({"kind": "error", "error": "E" * (10 << 20)})
for _ in range(14):
    send(frame)
""",
    "14 error frames of 512 KiB (within the string bound)": _PIPE + """
frame = saved({"kind": "case_error", "index": 0, "compile": False, "tampered": False, "error": "E" * (512 << 10)})
for _ in range(14):
    send(frame)
""",
    "a deflated tensor of 150 MiB (154 KB sent)": _PIPE + """
plain = zipfile.ZipFile(io.BytesIO(saved({"kind": "case_start", "index": torch.zeros(150 << 18)})))
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as z:
    for n in plain.namelist():
        z.writestr(n, plain.read(n), compress_type=zipfile.ZIP_DEFLATED if "/data/" in n else zipfile.ZIP_STORED)
send(buf.getvalue())
""",
    "100,000 small frames": _PIPE + """
frame = saved({"kind": "case_start", "index": 0})
for _ in range(100_000):
    send(frame)
""",
}


def one(name: str) -> dict:
    from autotune.config import compose
    from autotune.targets import get
    from autotune.verify.judge import judge

    cfg = compose(["verify=quick"]).verify
    if name == "honest":
        source, scan = (CANDIDATES / "rms_norm_rowwise.py").read_text(), True
    else:
        source = (CANDIDATES / "exec_hole.py").read_text().replace('ATTACK = "pass"', f"ATTACK = {ATTACKS[name]!r}")
        scan = False
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    v = judge(get("rms_norm"), source, "candidate.py", cfg, scan=scan)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"scenario": name, "peak_rise_mb": round((peak - before) / 1024, 1), "peak_mb": round(peak / 1024, 1),
            "status": v.status.value, "reason": v.reason[:160], "wall_s": round(time.monotonic() - started, 1)}


def main(argv: list[str]) -> None:
    if argv[:1] == ["--one"]:
        print(json.dumps(one(argv[1])))
        return
    names = argv or ["honest", *ATTACKS]
    print(f"{'scenario':<55} {'peak rise':>10} {'peak RSS':>9}  verdict")
    for name in names:
        out = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True, text=True, cwd=ROOT)
        if out.returncode != 0:
            print(f"{name:<55} the judge process failed: {out.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{name:<55} {r['peak_rise_mb']:>7} MB {r['peak_mb']:>6} MB  {r['status']}: {r['reason'][:90]}")


if __name__ == "__main__":
    main(sys.argv[1:])
