"""The report's tables, computed with pandas from run directories (ledger.jsonl, config.yaml, env.json).

Each function takes the loaded `Runs` and returns a DataFrame that both the plots and the CSVs use, so a
figure and its CSV can never disagree. Speedups are measured only on a GPU; without one they are NaN
here (the tables say "not measured" and the figures that would plot them are not drawn), never zero, and no
gain is projected from an assumed speedup.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from autotune.config import as_dict
from autotune.errors import UserError
from autotune.ledger import frame
from autotune.ledger import read as ledger_records
from autotune.records import amdahl_gain
from autotune.verify.verdict import is_correct


@dataclasses.dataclass(frozen=True)
class Runs:
    runs: pd.DataFrame  # one row per run: its settings and environment
    ledger: pd.DataFrame  # every record of every ledger, with a `run` column


def find_run_dirs(paths: list[str | Path]) -> list[Path]:
    """Run directories among `paths`: a run dir itself, or a sweep dir (any depth) that holds some."""
    found: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise UserError(f"{p} does not exist (give run or sweep directories, as `autotune run` printed them)")
        if (p / "ledger.jsonl").is_file():
            found.append(p)
        else:
            found.extend(sorted(q.parent for q in p.rglob("ledger.jsonl") if (q.parent / "config.yaml").is_file()))
    if not found:
        raise UserError("no run directory (a folder with ledger.jsonl and config.yaml) under "
                        f"{', '.join(map(str, paths))}")
    return list(dict.fromkeys(found))


def load(paths: list[str | Path]) -> Runs:
    dirs = find_run_dirs(paths)
    runs = pd.DataFrame([run_row(d) for d in dirs]).merge(swept(dirs), on="run", how="left")
    ledger = frame([d / "ledger.jsonl" for d in dirs])
    ledger["run"] = ledger["ledger"].map(lambda p: str(Path(p).parent))
    return Runs(runs, ledger)


def _saved_config(run: Path) -> dict[str, Any]:
    """A run's config.yaml as a plain dict, as saved (resolved when the run started); {} without one."""
    loaded = OmegaConf.load(run / "config.yaml") if (run / "config.yaml").is_file() else None
    return as_dict(loaded, resolve=False) if isinstance(loaded, DictConfig) else {}


def run_row(d: Path) -> dict:
    """A run's settings (what a sweep varies) and its environment (what every figure names)."""
    cfg = _saved_config(d)
    agent = cfg.get("agent", {}) or {}
    env = json.loads((d / "env.json").read_text()) if (d / "env.json").is_file() else {}
    return {"run": str(d), "run_id": cfg.get("run_id", d.name), "agent": agent.get("name"),
            "agent_model": agent.get("model") or "templates", "temperature": agent.get("temperature"),
            "turns": agent.get("turns"), "candidates": agent.get("candidates"),
            "prompt_variant": agent.get("prompt_variant") or "default",
            "targets": ",".join(map(str, cfg.get("targets") or [])) or "by profile",
            "environment": environment_line(env)}


IGNORED = ("run_id", "resume", "publish.repo", "hydra")  # differ between runs without being settings


def swept(dirs: list[Path]) -> pd.DataFrame:
    """The settings that differ between these runs (a sweep's axes), as `set:<key>` columns."""
    flat = pd.json_normalize([OmegaConf.to_container(OmegaConf.load(d / "config.yaml"))
                              if (d / "config.yaml").is_file() else {} for d in dirs])
    flat = flat.astype(str)
    keep = [k for k in flat.columns if flat[k].nunique() > 1 and not k.startswith(IGNORED)]
    out = flat[keep].rename(columns={k: f"set:{k}" for k in keep})
    out.insert(0, "run", [str(d) for d in dirs])
    return out


def environment_line(env: dict) -> str:
    gpu = env.get("gpu") or "no GPU"
    commit = (env.get("project_commit") or "unknown")[:10] + ("+dirty" if env.get("project_dirty") else "")
    return (f"{gpu}, driver {env.get('driver') or '-'}, torch {env.get('torch', '?')}, "
            f"triton {env.get('triton', '?')}, commit {commit}")


def _of(ledger: pd.DataFrame, kind: str) -> pd.DataFrame:
    return ledger[ledger["kind"] == kind].copy() if "kind" in ledger else pd.DataFrame()


def candidates(r: Runs) -> pd.DataFrame:
    """Every judged candidate in ledger order, with its measured speedup (NaN when not timed)."""
    c = _of(r.ledger, "candidate")
    if c.empty:
        return pd.DataFrame(columns=["run", "target", "agent", "id", "turn", "status", "speedup"])
    measured = c.get("verdict.measured", pd.Series(False, index=c.index)).fillna(False).astype(bool)
    speed = pd.to_numeric(c.get("verdict.speedup_geomean", pd.Series(np.nan, index=c.index)), errors="coerce")
    c["speedup"] = speed.where(measured)
    c["turn"] = pd.to_numeric(c["turn"]).astype(int)
    return c[["run", "target", "agent", "id", "turn", "status", "speedup", "ts"]].reset_index(drop=True)


def progress(r: Runs) -> pd.DataFrame:
    """Best speedup so far against candidates tried and dollars spent, per run and target."""
    c, llm = candidates(r), _of(r.ledger, "llm")
    rows = []
    for (run, target), g in c.groupby(["run", "target"], sort=False):
        spent = llm[(llm["run"] == run) & (llm["target"] == target)] if not llm.empty else llm
        for i, (_, row) in enumerate(g.sort_values("ts").iterrows(), start=1):
            dollars = float(spent[spent["ts"] <= row["ts"]]["cost_usd"].sum()) if not spent.empty else 0.0
            rows.append({"run": run, "target": target, "agent": row["agent"], "tried": i,
                         "dollars": dollars, "speedup": row["speedup"]})
    p = pd.DataFrame(rows, columns=["run", "target", "agent", "tried", "dollars", "speedup"])
    p["best_so_far"] = p.groupby(["run", "target"])["speedup"].cummax() if not p.empty else []
    return p


def statuses_per_turn(r: Runs) -> pd.DataFrame:
    """How candidates end, per turn: a (turn x status) count table."""
    c = candidates(r)
    if c.empty:
        return pd.DataFrame()
    return c.pivot_table(index="turn", columns="status", values="id", aggfunc="count", fill_value=0)


def costs(r: Runs) -> pd.DataFrame:
    """Per run: the run summary's own accounting (autotune.agent.accounting.summarize over its ledger, so the
    report and summary.json can never disagree): tokens and dollars per accepted (else passing) kernel, and
    the shares of tokens, dollars and wall time that went to failed attempts and to retries."""
    from autotune.agent.accounting import summarize

    c = candidates(r)
    rows = []
    for run in r.runs["run"]:
        records = ledger_records(Path(run) / "ledger.jsonl")
        acc = summarize(records)
        unpriced = bool(acc["tokens"]) and not acc["dollars"]
        rows.append({"run": run, "candidates": int((c["run"] == run).sum()),
                     "correct": sum(map(is_correct, c.loc[c["run"] == run, "status"])),  # 0 for a run that judged none
                     "died": _why_it_died(records),
                     "passing": acc["kernels_passing"], "accepted": acc["kernels_accepted"],
                     "tokens": acc["tokens"], "per_kernel_basis": acc["per_kernel_basis"],
                     # tokens at $0: agent.price was not set, so dollars are unknown, not zero
                     "dollars": np.nan if unpriced else acc["dollars"],
                     "prices": "not set (agent.price)" if unpriced else "set" if acc["tokens"] else "-",
                     "tokens_per_kernel": _nan(acc["tokens_per_kernel"]),
                     "dollars_per_kernel": np.nan if unpriced else _nan(acc["dollars_per_kernel"]),
                     **{k: _nan(acc[k]) for k in ("attempts", "failed_attempts", "retries", "failed_token_share",
                                                  "failed_dollar_share", "failed_wall_share", "retry_token_share")}})
    return pd.DataFrame(rows)


def _why_it_died(records: list[dict]) -> str:
    """The error a run stopped on (its last run-level `failed` record), '' for a run that did not."""
    failed = [rec for rec in records if rec.get("kind") == "failed" and not rec.get("target")]
    return str(failed[-1].get("error", ""))[:300] if failed else ""


def _nan(x) -> float:
    return np.nan if x is None else x


def cache_per_turn(r: Runs) -> pd.DataFrame:
    """Prompt-cache hit rate per turn, over the requests whose server reported cached tokens."""
    llm = _of(r.ledger, "llm")
    if llm.empty or "cached_known" not in llm:
        return pd.DataFrame(columns=["turn", "requests", "prompt_tokens", "cached_tokens", "hit_rate"])
    known = llm[llm["cached_known"].fillna(False).astype(bool)].astype({"turn": int})
    g = known.groupby("turn").agg(requests=("turn", "size"), prompt_tokens=("prompt_tokens", "sum"),
                                  cached_tokens=("cached_tokens", "sum")).reset_index()
    g["hit_rate"] = g["cached_tokens"] / g["prompt_tokens"].where(g["prompt_tokens"] > 0)
    return g


PROPOSAL_COLUMNS = ["run", "proposal", "target", "share", "speedup", "projected_gain", "measured_gain", "status",
                    "evidence"]


def proposals(r: Runs) -> pd.DataFrame:
    """Per proposal, what a reviewer triages by: the target's share of serving time in its run's profile, the
    measured speedup (NaN: not measured), the end-to-end gain the profile projects from that speedup (NaN without
    one: no assumed speedup is ever drawn or printed), the measured gain (time per output token before and after,
    GPU only), the review state now (the publish repository's record; as published where that is gone) and the
    evidence page. The largest share first."""
    props, prof, checks = _of(r.ledger, "proposal"), _of(r.ledger, "profile"), _of(r.ledger, "model_check")
    states = _review_states(r)
    rows = []
    for _, p in props.iterrows():
        share = _share(prof, p["run"], p["target"])
        speedup = pd.to_numeric(p.get("speedup"), errors="coerce")
        s = float(speedup) if speedup == speedup and speedup else None
        rows.append({"run": p["run"], "proposal": p["id"], "target": p["target"],
                     "share": np.nan if share is None else share, "speedup": s if s else np.nan,
                     "projected_gain": amdahl_gain(share, s) if s and share is not None else np.nan,
                     "measured_gain": _measured_gain(checks, p["run"], p["candidate"]),
                     "status": states.get(p["id"]) or f"{p.get('status') or 'open'} (as published)",
                     "evidence": p.get("evidence_path") or ""})
    out = pd.DataFrame(rows, columns=PROPOSAL_COLUMNS)
    return out.sort_values("share", ascending=False, na_position="last", kind="stable").reset_index(drop=True)


def _review_states(r: Runs) -> dict[str, str]:
    """Each proposal's review state in the publish repositories the runs named (config.yaml's publish.repo);
    a repository that is gone or unreadable answers nothing (the ledger's state at publishing stands)."""
    from autotune.publish import gitops, records

    states: dict[str, str] = {}
    for repo in {str((_saved_config(Path(run)).get("publish") or {}).get("repo") or "") for run in r.runs["run"]}:
        if not repo:
            continue
        try:
            states.update({p.id: str(p.status) for p in records.all_records(gitops.open_repo(repo))})
        except UserError:  # gone, or not a repository now: the report reads it only for the review state
            continue
    return states


def _share(prof: pd.DataFrame, run: str, target: str) -> float | None:
    """The target's share of serving time in the run's profile (None: no profile, or not a hot spot there)."""
    rows = prof[prof["run"] == run] if not prof.empty else prof
    for hotspots in rows.get("hotspots", []):
        for h in hotspots or []:
            if h.get("target") == target:
                return h.get("share")
    return None


def _measured_gain(checks: pd.DataFrame, run: str, candidate: str) -> float:
    if checks.empty or "latency.before.tpot_p50_ms" not in checks:
        return np.nan
    row = checks[(checks["run"] == run) & (checks["candidate"] == candidate)]
    if row.empty:
        return np.nan
    before, after = row["latency.before.tpot_p50_ms"].iloc[-1], row["latency.after.tpot_p50_ms"].iloc[-1]
    return 1 - after / before if before and after == after else np.nan


def settings_table(r: Runs) -> pd.DataFrame:
    """Side by side across the sweep's settings: what each setting got for what it cost."""
    c = candidates(r)
    best = c.groupby("run")["speedup"].max().rename("best_speedup")
    out = r.runs.merge(costs(r), on="run").merge(best, on="run", how="left")
    cols = ["run_id", "agent", "agent_model", "temperature", "turns", "candidates_x", "prompt_variant", "targets",
            "candidates_y", "correct", "passing", "accepted", "best_speedup", "tokens", "dollars",
            "dollars_per_kernel", "failed_token_share", "failed_wall_share", "retry_token_share", "died"]
    cols[1:1] = [c for c in out.columns if c.startswith("set:")]
    out = out[cols].rename(columns={"candidates_x": "candidates_per_target", "candidates_y": "judged"})
    return out


ENGINE_COLUMNS = ["run", "engine", "agent_requests", "agent_e2e_p50_ms", "before_tok_s", "after_tok_s",
                  "before_ttft_p50_ms", "after_ttft_p50_ms", "before_tpot_p50_ms", "after_tpot_p50_ms",
                  "outputs_identical", "tokens_per_kernel", "dollars_per_kernel", "note"]


def _measured(row: pd.Series, key: str) -> Any:
    """row[key]; None where the column is missing or NaN (not measured)."""
    value = row.get(key) if key in row else None
    return value if value == value else None


def engine_serving(r: Runs) -> pd.DataFrame:
    """Per run whose agent a live engine served (autotune/engine/selfopt.py): the agent's own traffic on that
    engine before and after the run's kernels, and the agent's cost per kernel."""
    rows = []
    for _, e in _of(r.ledger, "engine_serving").iterrows():
        get = functools.partial(_measured, e)
        rows.append({"run": e["run"], "engine": f"{get('engine.name')} {get('engine.version')}",
                     "agent_requests": get("agent_live.requests"), "agent_e2e_p50_ms": get("agent_live.e2e_ms.p50"),
                     "before_tok_s": get("before.output_tokens_per_s"), "after_tok_s": get("after.output_tokens_per_s"),
                     "before_ttft_p50_ms": get("before.ttft_ms.p50"), "after_ttft_p50_ms": get("after.ttft_ms.p50"),
                     "before_tpot_p50_ms": get("before.tpot_ms.p50"), "after_tpot_p50_ms": get("after.tpot_ms.p50"),
                     "outputs_identical": get("outputs_identical"),
                     "tokens_per_kernel": get("cost_per_kernel.tokens_per_kernel"),
                     "dollars_per_kernel": get("cost_per_kernel.dollars_per_kernel"), "note": get("note")})
    return pd.DataFrame(rows, columns=ENGINE_COLUMNS)
