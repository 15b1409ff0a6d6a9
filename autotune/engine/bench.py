"""`autotune bench`: the same workload against engine setups A and B, side by side, and the upgrade gate.

A and B are `engine` with `bench.a` / `bench.b` replacing some settings: B with the exported plugin
(`+bench.b.plugin=DIR`, a launched server restarted with it), another engine version (`+bench.b.python=...`)
or other flags (`+bench.b.args=[...]`); two running servers are `+bench.a.url=... +bench.b.url=...`. Each
setup is started `bench.rounds` times, A and B alternately, and serves the workload `bench.repeats` times per
start (after the warm-up), without the profiler: the spread between repeats is the measured noise. Each setup
also answers `bench.prompts` fixed prompts greedily (temperature 0, `bench.max_tokens` tokens, EOS ignored),
and B's outputs must equal A's (text, and token ids where the server returns them).

Per setup the table gives the median over its repeats of output tokens/s, TTFT p50/p95, TPOT p50/p95, end to
end p95 and errors, with the spread ((max - min) / median). With `bench.margin=M` it is the gate: B fails on a
metric when its median is worse than A's by more than M and its best repeat is worse than A's worst (outside
the noise), when it has more failed requests, or when its outputs differ; `autotune bench` then exits 1.
`bench.per_kernel=true` with a plugin also benches B with each of its kernels alone (attribution: which kernel
made the difference). Writes `<bench.out_dir>/<run>/bench.json` (every figure, the environment and each
setup's engine record) and `bench.md` (the table, for an evidence page or a PR comment).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import secrets
import shutil
import statistics
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from autotune import env, text
from autotune.config import as_dict
from autotune.engine.launch import Server, auth_headers, http, plugin_kernels, plugin_notes, serving
from autotune.engine.profile import measure
from autotune.engine.settings import EngineSettings
from autotune.engine.stats import LoadReport
from autotune.errors import UserError

# (label, how to read it off a LoadReport, which way is better)
METRICS = (("output tok/s", lambda r: r.output_tokens_per_s, "higher"),
           ("TTFT p50 ms", lambda r: r.ttft_ms.p50, "lower"), ("TTFT p95 ms", lambda r: r.ttft_ms.p95, "lower"),
           ("TPOT p50 ms", lambda r: r.tpot_ms.p50, "lower"), ("TPOT p95 ms", lambda r: r.tpot_ms.p95, "lower"),
           ("e2e p95 ms", lambda r: r.e2e_ms.p95, "lower"))


@dataclasses.dataclass
class SetupRun:
    label: str
    settings: EngineSettings
    reports: list[LoadReport] = dataclasses.field(default_factory=list)
    load: list[float] = dataclasses.field(default_factory=list)  # the machine's 1-minute load after each repeat
    outputs: list[dict] | None = None  # the fixed prompts' greedy outputs
    engine: dict | None = None  # the server's record (version, flags)

    def values(self, metric: str) -> list[float]:
        get = next(g for name, g, _ in METRICS if name == metric)
        return [v for v in (get(r) for r in self.reports) if v is not None]

    def median(self, metric: str) -> float | None:
        values = self.values(metric)
        return statistics.median(values) if values else None

    def spread(self, metric: str) -> float | None:
        values, mid = self.values(metric), self.median(metric)
        return (max(values) - min(values)) / mid if values and mid else None

    @property
    def failed(self) -> int:
        return sum(r.failed for r in self.reports)

    @property
    def requests(self) -> int:
        return sum(r.num_requests for r in self.reports)


def setups(cfg: DictConfig) -> list[SetupRun]:
    base = EngineSettings.of(cfg.engine)
    if not base.live:
        raise UserError("autotune bench drives a live engine: add engine=vllm (or sglang) with engine.launch=true "
                        "engine.model=PATH engine.python=PATH, or engine.url=URL and the setups' +bench.a.url/b.url")
    a = base.with_overrides(_plain(cfg.bench.a))
    b = base.with_overrides(_plain(cfg.bench.b))
    if a == b:
        raise UserError("bench.a and bench.b describe the same setup: give B what differs, e.g. "
                        "+bench.b.plugin=dist/vllm-plugin or +bench.b.python=/other/venv/bin/python")
    runs = [SetupRun("A", a), SetupRun("B", b)]
    if cfg.bench.per_kernel:
        if not b.plugin:
            raise UserError("bench.per_kernel=true needs a plugin in B (+bench.b.plugin=DIR)")
        kernels = list(b.plugin_kernels) or plugin_kernels(b.plugin)
        runs += [SetupRun(f"B[{k}]", b.with_overrides({"plugin_kernels": [k]})) for k in kernels if len(kernels) > 1]
    return runs


def _plain(node) -> dict:
    return as_dict(node)


def bench(cfg: DictConfig) -> dict[str, Any]:
    """Run every setup, alternately, and return the bench record (also written to bench.json and bench.md)."""
    runs = setups(cfg)
    out = Path(cfg.bench.out_dir) / f"{dt.datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
    work = out / "work"
    rounds, repeats = max(1, int(cfg.bench.rounds)), max(1, int(cfg.bench.repeats))
    if not any(r.settings.launch for r in runs):  # running servers cost nothing to switch: alternate every repeat
        rounds, repeats = rounds * repeats, 1
    console = text.console()
    for r in range(rounds):
        for run in runs:
            console.print(f"bench: round {r + 1} of {rounds}, setup {run.label} ({run.settings.describe()}): "
                          f"{'starting the engine' if run.settings.launch else 'attaching'} ...")
            with serving(run.settings, work / run.label) as server:
                serve_setup(cfg, server, run, repeats, console)
    shutil.rmtree(work, ignore_errors=True)
    record = bench_record(cfg, runs, rounds, repeats)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    (out / "bench.md").write_text(markdown(record) + "\n")
    record["dir"] = str(out)
    return record


def serve_setup(cfg: DictConfig, server: Server, run: SetupRun, repeats: int, console=None) -> None:
    run.engine = server.record()
    for i in range(repeats):
        report = measure(cfg, server, profiled=False)[0]
        run.reports.append(report)
        run.load.append(os.getloadavg()[0])
        if console is not None:
            console.print(f"bench: {run.label} repeat {i + 1} of {repeats}: {report.num_requests} requests, "
                          f"{report.output_tokens_per_s:.1f} output tok/s, load {run.load[-1]:.1f} on "
                          f"{os.cpu_count()} CPUs")
    if run.outputs is None:
        run.outputs = greedy_outputs(server, int(cfg.bench.prompts), int(cfg.bench.max_tokens))


def fixed_prompts(n: int, vocab_size: int) -> list[list[int]]:
    """n prompts of token ids, the same on every machine and run (8 to 29 tokens, ids below the vocabulary)."""
    import random

    rng = random.Random(19)
    return [[rng.randrange(3, max(4, vocab_size)) for _ in range(8 + 3 * i % 22)] for i in range(n)]


def greedy_outputs(server: Server, n: int, max_tokens: int) -> list[dict]:
    """Each fixed prompt's greedy completion: text, and token ids where the server returns them (vLLM)."""
    from autotune.engine.workload import model_vocab_size

    vocab = server.settings.vocab_size or model_vocab_size(server.settings.model) or server.vocab_size or 1000
    outputs = []
    for prompt in fixed_prompts(n, min(vocab, 1000)):
        body = {"model": server.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
                "ignore_eos": True}
        if server.settings.name == "vllm":
            body["return_token_ids"] = True
        status, text = http("POST", server.url + "/v1/completions", body, server.settings.request_timeout_s,
                            auth_headers(server.settings))
        if status != 200:
            outputs.append({"prompt": prompt, "error": f"HTTP {status}: {' '.join(text.split())[:200]}"})
            continue
        choice = (json.loads(text).get("choices") or [{}])[0]
        outputs.append({"prompt": prompt, "text": choice.get("text"), "token_ids": choice.get("token_ids")})
    return outputs


def outputs_differ(a: list[dict] | None, b: list[dict] | None) -> list[int]:
    """The fixed prompts on which B's greedy output is not A's (an error on either side counts)."""
    if a is None or b is None:
        return []
    return [i for i, (x, y) in enumerate(zip(a, b)) if x.get("error") or y.get("error")
            or x.get("text") != y.get("text") or (x.get("token_ids") and y.get("token_ids")
                                                  and x["token_ids"] != y["token_ids"])]


def compare(a: SetupRun, b: SetupRun, margin: float | None) -> list[dict]:
    """Per metric: both medians, B's relative change and its verdict (better, worse, within noise)."""
    rows = []
    for name, _, better in METRICS:
        ma, mb = a.median(name), b.median(name)
        if ma is None or mb is None or ma == 0:
            rows.append({"metric": name, "a": ma, "b": mb, "change": None, "verdict": "-"})
            continue
        change = (mb - ma) / ma
        worse_by = -change if better == "higher" else change
        va, vb = a.values(name), b.values(name)
        apart = (max(vb) < min(va) or min(vb) > max(va))  # the repeats' ranges do not overlap
        limit = margin if margin is not None else 0.0
        verdict = ("worse" if worse_by > limit and apart else "better" if -worse_by > limit and apart
                   else "within noise")
        rows.append({"metric": name, "a": ma, "b": mb, "change": change, "verdict": verdict})
    return rows


def bench_record(cfg: DictConfig, runs: list[SetupRun], rounds: int, repeats: int) -> dict[str, Any]:
    a, b = runs[0], runs[1]
    margin = cfg.bench.margin
    margin = None if margin is None else float(margin)
    rows = compare(a, b, margin)
    differ = outputs_differ(a.outputs, b.outputs)
    reasons = [f"{r['metric']} {100 * r['change']:+.1f}%" for r in rows if r["verdict"] == "worse"]
    if b.failed > a.failed:
        reasons.append(f"{b.failed} failed requests against A's {a.failed}")
    if differ:
        reasons.append(f"greedy outputs differ on {len(differ)} of {len(b.outputs or [])} fixed prompts")
    noisy = [f"{name} ±{50 * sp:.0f}%" for name, _, _ in METRICS for r in (a, b)
             if (sp := r.spread(name)) is not None and margin is not None and sp / 2 > margin]
    gate = None if margin is None else {"margin": margin, "passed": not reasons, "reasons": reasons,
                                        "noise_over_margin": list(dict.fromkeys(noisy))}
    labels = as_dict(cfg.labels) if "labels" in cfg else {}
    return {"environment": env.collect(labels).to_dict(), "workload": as_dict(cfg.workload),
            "rounds": rounds, "repeats": repeats, "machine": {"cpus": os.cpu_count()},
            "setups": [setup_record(r) for r in runs], "comparison": rows,
            "attribution": [{"label": r.label, "kernels": list(r.settings.plugin_kernels),
                             "comparison": compare(a, r, margin)} for r in runs[2:]],
            "outputs": {"prompts": len(a.outputs or []), "max_tokens": int(cfg.bench.max_tokens),
                        "identical": not differ, "differ": differ}, "gate": gate}


def setup_record(run: SetupRun) -> dict[str, Any]:
    kernels = plugin_manifest(run.settings.plugin) if run.settings.plugin else {}
    if run.settings.plugin_kernels:
        kernels = {t: k for t, k in kernels.items() if t in run.settings.plugin_kernels}
    return {"label": run.label, "describe": run.settings.describe(), "engine": run.engine, "kernels": kernels,
            "summary": {name: {"median": run.median(name), "spread": run.spread(name)} for name, _, _ in METRICS},
            "failed": run.failed, "requests": run.requests, "load_1m": run.load,
            "reports": [r.to_dict(with_requests=False) for r in run.reports], "outputs": run.outputs}


def _fmt(value: float | None, spread: float | None = None) -> str:
    if value is None:
        return "-"
    text = f"{value:.1f}" if abs(value) < 1000 else f"{value:,.0f}"
    return text + (f" ±{50 * spread:.0f}%" if spread else "")


def markdown(record: dict[str, Any]) -> str:
    """The side-by-side table (medians ± half the spread), the outputs' equality and the gate's verdict."""
    setups_ = record["setups"]
    head = "| metric | " + " | ".join(s["label"] for s in setups_) + " | B vs A |"
    lines = [head, "|" + " --- |" * (len(setups_) + 2)]
    for row in record["comparison"]:
        cells = [_fmt(s["summary"][row["metric"]]["median"], s["summary"][row["metric"]]["spread"]) for s in setups_]
        change = "-" if row["change"] is None else f"{100 * row['change']:+.1f}% ({row['verdict']})"
        lines.append(f"| {row['metric']} | " + " | ".join(cells) + f" | {change} |")
    lines.append("| failed requests | " + " | ".join(f"{s['failed']}/{s['requests']}" for s in setups_) + " | |")
    outputs = record["outputs"]
    lines.append("")
    lines.append(f"Greedy outputs on {outputs['prompts']} fixed prompts ({outputs['max_tokens']} tokens): "
                 + ("identical." if outputs["identical"] else f"differ on prompts {outputs['differ']}."))
    lines.append(f"A and B alternated {record['rounds']} time(s), serving the workload {record['repeats']} time(s) "
                 "each time; ± is half the spread between all of a setup's repeats (the measured noise).")
    cpus = (record.get("machine") or {}).get("cpus")
    for s in setups_:
        engine = s.get("engine") or {}
        load = s.get("load_1m") or []
        busy = f"; machine load {min(load):.1f}-{max(load):.1f} on {cpus} CPUs" if load else ""
        lines.append(f"- {s['label']}: {s['describe']}; {engine.get('name')} {engine.get('version')}{busy}")
        lines += [f"  - {note}" for note in plugin_notes(engine)]
    gate = record["gate"]
    if gate is not None:
        verdict = "PASSED" if gate["passed"] else "FAILED: " + "; ".join(gate["reasons"])
        lines.append(f"\nGate (margin {100 * gate['margin']:g}%): {verdict}")
        if gate.get("noise_over_margin"):
            lines.append(f"The noise is larger than the margin ({', '.join(gate['noise_over_margin'])}): a difference "
                         "of the margin's size cannot be told from it here, so 'within noise' says little; rerun on "
                         "an idle machine or with more bench.repeats.")
    return "\n".join(lines)


def plugin_manifest(plugin: str) -> dict[str, dict]:
    """{target: {id, status, sha256}} of an exported plugin's kernels."""
    try:
        return dict(json.loads((Path(plugin) / "autotune_vllm_kernels" / "manifest.json").read_text())["kernels"])
    except (OSError, KeyError, ValueError):
        return {}


def bench_for_kernel(source: str, bench_dir: str | Path) -> dict[str, Any] | None:
    """The newest bench whose B served this exact kernel (by the sha256 its plugin's manifest records): what a
    proposal's evidence page shows as measured on the engine; None when no bench did."""
    import hashlib

    sha = hashlib.sha256(source.encode()).hexdigest()
    for path in sorted(Path(bench_dir).glob("*/bench.json"), reverse=True):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        with_it = [s for s in record.get("setups", [])[1:] if any(k.get("sha256") == sha
                                                                  for k in (s.get("kernels") or {}).values())]
        if with_it:
            alone = next((s["label"] for s in with_it if len(s.get("kernels") or {}) == 1), None)
            return {"dir": str(path.parent), "markdown": markdown(record), "gate": record.get("gate"),
                    "alone": alone}
    return None
