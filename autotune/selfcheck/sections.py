"""The five sections of the selfcheck. Each takes (plan, clock, earlier sections' data) and returns
(ok, data): ok is True/False where there is something to judge, None for figures only."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from autotune.selfcheck import Clock, Plan, cli, load_json
from autotune.selfcheck.bandwidth import fraction_of_roofline, library_table
from autotune.selfcheck.bandwidth import roofline as measure_roofline
from autotune.selfcheck.expect import Expectation, expectations

# The sizes: what runs on a GPU, and the same code with small sizes on the CPU (dry run).
GPU = {"roofline_bytes": 1 << 30, "model": "llama3_8b", "run_model": "llama3_2_1b",
       "profile": ["workload=chat", "workload.num_requests=12", "workload.output_len.max=64",
                   "workload.prompt_len.max=1024", "profile.nsight=true"],
       "run_targets": "[rms_norm,silu_and_mul]", "candidates": 2, "workers": 6, "verify": []}
DRY = {"roofline_bytes": 32 << 20, "model": "tiny", "run_model": "tiny",
       "profile": ["workload.num_requests=4"], "run_targets": "[rms_norm]", "candidates": 1, "workers": 2,
       "verify": ["verify=quick", "verify.dtypes=[float32]", "verify.models=[tiny]", "verify.timeout_s=600"],
       # the dry run checks the path, not the kernels: fewer interpreter cases (conf/verify/quick.yaml, fp32 only,
       # the tiny model's sizes), and room for a loaded machine (the slowed kernel reads each row 8 times)
       "stand_in": ["verify.timing.warmup_ms=1", "verify.timing.rep_ms=1", "verify.timing.repetitions=2"]}
# The protocol's shape on the stand-in when the profile saw none of the target: an rms_norm of the tiny model.
STAND_IN_SHAPE = ((4, 128), "float32", 1)


def sizes(plan: Plan) -> dict:
    return DRY if plan.dry_run else GPU


def header(plan: Plan) -> dict:
    from autotune.env import collect

    environment = collect().to_dict()
    return {"mode": "dry run (CPU, interpreter, small sizes)" if plan.dry_run else "GPU",
            "gpu": environment.get("gpu") or "cpu", "environment": environment}


def roofline(plan: Plan, clock: Clock, done: dict) -> tuple[None, dict]:
    return None, measure_roofline(plan.accel, sizes(plan)["roofline_bytes"])


def profile(plan: Plan, clock: Clock, done: dict) -> tuple[bool, dict]:
    out = plan.work / "traces"
    proc = cli(plan, clock, ["profile", f"model={sizes(plan)['model']}", f"device={plan.device}",
                             f"profile.out_dir={out}", *sizes(plan)["profile"]])
    runs = sorted(p for p in out.glob("*") if (p / "hotspots.json").is_file()) if out.is_dir() else []
    if proc.returncode != 0 or not runs:
        return False, {"error": _last_line(proc), "out_dir": str(out)}
    run = runs[-1]
    serve = load_json(run / "serve.json")
    hotspots = load_json(run / "hotspots.json")
    data = {"out_dir": str(out), "run": run.name, "model": sizes(plan)["model"],
            "ttft_ms": serve["ttft_ms"], "tpot_ms": serve["tpot_ms"],
            "output_tokens_per_s": serve["output_tokens_per_s"], "requests": serve["num_requests"],
            "hotspots": [{k: h.get(k) for k in ("target", "share", "calls", "total_us", "device_us")}
                         for h in hotspots["hotspots"]],
            "nsight": load_json(run / "nsight.json") if (run / "nsight.json").is_file() else None,
            "nsight_note": _grep(proc.stdout, "nsight")}
    return bool(data["hotspots"]), data


def verify(plan: Plan, clock: Clock, done: dict) -> tuple[bool, dict]:
    items = expectations(plan.root)
    traces = done.get("profile", {}).get("out_dir")  # shapes from the profile just taken, when there is one
    extra = [f"device={plan.device}", *sizes(plan)["verify"]] + ([f"profile.out_dir={traces}"] if traces else [])
    cheats = [e for e in items if e.expected and not e.correct][:plan.max_candidates or None]
    served = {h["target"] for h in done.get("profile", {}).get("hotspots", [])}  # first: timed on served shapes
    correct = sorted((e for e in items if e.correct), key=lambda e: e.target not in served)
    correct = correct[:plan.max_candidates or None]
    with ThreadPoolExecutor(sizes(plan)["workers"]) as pool:  # rejected ones: correctness only, in parallel
        judged = list(pool.map(lambda e: _judge(plan, clock, e, extra), cheats))
    judged += [_judge(plan, clock, e, extra) for e in correct]  # timed: one at a time, the GPU to itself
    if plan.dry_run:  # the timing protocol the GPU run takes inside `autotune verify`, here on the stand-in
        for row, e in zip(judged[len(judged) - len(correct):], correct):
            row["stand_in"] = stand_in_timing(plan, e, traces)
            row["as_expected"] = row["as_expected"] and row["stand_in"]["as_expected"]
    roof = done.get("roofline", {}).get("copy_gbps")  # the stand-in's own figure on a dry run: like for like
    for row in judged:
        for t in row.get("timings", []) + row.get("stand_in", {}).get("timings", []):
            t["fraction_of_roofline"] = fraction_of_roofline(row["target"], t["shape"], t["dtype"],
                                                             t["candidate_us"], roof) if roof else None
    examples = {e.target: plan.root / e.path for e in correct}
    try:
        libraries = library_table(examples, plan.accel, smallest=plan.dry_run)
    except Exception as e:  # noqa: BLE001  (a library's own failure is a finding, not a failed check)
        libraries = [{"note": f"library comparison failed: {type(e).__name__}: {e}"}]
    unlisted = [e.path for e in items if e.expected is None]
    return all(r["as_expected"] for r in judged), {"candidates": judged, "libraries": libraries,
                                                  "not_run": unlisted}


def stand_in_timing(plan: Plan, e: Expectation, traces: str | None) -> dict:
    """`timing.measure` of a correct kernel on the CPU device layer, on its smallest served shape: both bench
    processes, the baselines, the statistics, the re-check. Its figures are labelled stand-ins, and the status
    must stay `unmeasured` with the stand-in's reason."""
    from autotune.config import compose
    from autotune.targets import get
    from autotune.verify import latest_shapes
    from autotune.verify.timing import STAND_IN_REASON, Timed, measure
    from autotune.verify.verdict import Status, Verdict

    served = latest_shapes(e.target, traces) if traces else []
    if not served and e.target != "rms_norm":  # a target's defaults are a GPU's sizes: hours in the interpreter
        return {"device": plan.accel.properties().name, "stand_in": True, "status": "not run",
                "reason": f"no served shape of {e.target} in the profile", "timings": [], "absent": {},
                "compile_backend": "", "kept_as_timings": False, "as_expected": True}
    shapes = [min(served, key=lambda s: math.prod(s.shape))] if served else [STAND_IN_SHAPE]
    cfg = compose([*sizes(plan)["verify"], *sizes(plan)["stand_in"]])
    seen: list[Timed] = []
    verdict = Verdict(status=Status.UNMEASURED, reason="", target=e.target, candidate=e.path)
    status, reason = measure(get(e.target), (plan.root / e.path).read_text(), shapes, cfg.verify, verdict,
                             accel=plan.accel, on_timed=seen.append)
    timed = seen[0]
    return {"device": timed.device, "stand_in": timed.stand_in, "status": status.value, "reason": reason,
            "timings": [dataclasses.asdict(t) for t in timed.timings], "absent": timed.absent,
            "compile_backend": timed.compile_backend, "kept_as_timings": bool(verdict.timings),
            "as_expected": timed.stand_in and status is Status.UNMEASURED and reason == STAND_IN_REASON
            and not verdict.timings}


def _judge(plan: Plan, clock: Clock, e: Expectation, extra: list[str], more: tuple[str, ...] = ()) -> dict:
    proc = cli(plan, clock, ["verify", e.target, str(plan.root / e.path), "--json", *extra, *more])
    try:
        v = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"file": e.path, "target": e.target, "expected": e.expected, "status": "no verdict",
                "reason": _last_line(proc), "as_expected": False}
    return {"file": e.path, "target": e.target, "expected": e.expected, "status": v["status"],
            "reason": v["reason"], "as_expected": e.matches(v["status"], on_gpu=not plan.dry_run),
            "timings": v.get("timings", []), "speedup_geomean": v.get("speedup_geomean"),
            "duration_s": v.get("duration_s")}


def run(plan: Plan, clock: Clock, done: dict) -> tuple[bool, dict]:
    repo, run_dir = _scratch_repo(plan.work / "publish"), plan.work / "run"
    s = sizes(plan)
    proc = cli(plan, clock, ["run", f"targets={s['run_targets']}", f"device={plan.device}", f"model={s['run_model']}",
                             f"agent.candidates={s['candidates']}", f"publish.repo={repo}",
                             f"hydra.run.dir={run_dir}", "workload.num_requests=8", *sizes(plan)["verify"]])
    summary_file = run_dir / "summary.json"
    if not summary_file.is_file():
        return False, {"error": _last_line(proc)}
    summary = load_json(summary_file)
    checks = [json.loads(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines()
              if '"model_check"' in line]
    data = {"exit": proc.returncode, "outcomes": [{k: o[k] for k in ("target", "status", "verdict", "detail")}
                                                  for o in summary["outcomes"]],
            "model_checks": [{k: c.get(k) for k in ("target", "passed", "reason", "latency")} for c in checks],
            "accounting": summary["accounting"]}
    proposed = all(o["status"] == "proposed" for o in summary["outcomes"]) and summary["outcomes"]
    latency_ok = plan.dry_run or all(c.get("latency") for c in data["model_checks"])
    return bool(proc.returncode == 0 and proposed and latency_ok), data


def protocol(plan: Plan, clock: Clock, done: dict) -> tuple[bool, dict]:
    """The timing protocol against kernels whose right answer is known: slower, and implausible."""
    slowed = Expectation("rms_norm", "tests/verify/candidates/rms_norm_slowed.py", "slower")
    impossible = Expectation("rms_norm", "tests/verify/candidates/rms_norm_rowwise.py", "incorrect")
    extra = [f"device={plan.device}", "verify.shapes=default", *sizes(plan)["verify"]]
    rows = [_judge(plan, clock, slowed, extra),
            # 1 GB/s: every correct time is below the floor this implies, so it must be flagged
            _judge(plan, clock, impossible, extra, ("verify.peak_bandwidth_gbps=1",))]
    if plan.dry_run:  # no GPU timing on the CPU: both are correct kernels, so both are `unmeasured`; the slowed
        for row in rows:  # one's timing runs on the stand-in (labelled; it stays `unmeasured`)
            row["as_expected"] = row["status"] == "unmeasured"
        rows[0]["stand_in"] = stand_in_timing(plan, slowed, done.get("profile", {}).get("out_dir"))
        rows[0]["as_expected"] = rows[0]["as_expected"] and rows[0]["stand_in"]["as_expected"]
    else:
        rows[1]["as_expected"] = rows[1]["as_expected"] and "implausible" in rows[1]["reason"]
    return all(r["as_expected"] for r in rows), {"checks": rows}


def _scratch_repo(path: Path) -> Path:
    """An empty git repository with one commit on main: proposals go there, not into the checkout."""
    if not (path / ".git").is_dir():
        path.mkdir(parents=True, exist_ok=True)
        (path / "README.md").write_text("selfcheck scratch repository\n")
        for args in (["init", "-q", "-b", "main"], ["add", "README.md"],
                     ["-c", "user.name=selfcheck", "-c", "user.email=selfcheck@localhost", "commit", "-qm", "start"]):
            subprocess.run(["git", *args], cwd=path, check=True, capture_output=True)
    return path


def _last_line(proc: subprocess.CompletedProcess) -> str:
    lines = (proc.stderr or proc.stdout or "").strip().splitlines()
    return f"exit {proc.returncode}: {lines[-1] if lines else 'no output'}"


def _grep(text: str, word: str) -> str:
    return next((line.strip() for line in text.splitlines() if word in line.lower()), "")

