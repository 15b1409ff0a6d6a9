"""The whole loop, from a served model to proposals a reviewer can judge in a few minutes.

`autotune run` does, in order, recording everything in its run directory (printed at the start):
  1. profile: serve the configured model and workload under torch.profiler (or read `trace=PATH`);
  2. choose targets: `targets=[...]`, or every target above `run.min_share` of serving time;
  3. per target, the agent (`agent=search|openai|replay`) writes candidates and the checker judges
     each one in an isolated process; every LLM call, candidate and verdict goes to the ledger;
  4. the best passing candidate runs inside the whole model (sandboxed): same greedy tokens as the
     reference on fixed prompts, logits within tolerance (and latency before/after on a GPU);
  5. publish: a branch `autotune/<op>-<id>` with the kernel, a regression test and the evidence, as a
     local proposal (`publish=local`, then `autotune review`) or a GitHub pull request (`publish=github`).

The run directory holds config.yaml (resolved), env.json, ledger.jsonl (one JSON record per event; read
it with `autotune.ledger.frame`), transcript.jsonl (every LLM exchange), candidates/<op>/, profile/ and
summary.json; cli.log gets one line per event, and a terminal shows a live table (autotune/run/progress.py).
Targets are worked on side by side; candidates are judged at most verify.workers at a time
(autotune/agent/slots.py). Overnight runs die: a run that fails records why, keeps everything judged so
far and prints `autotune run resume=<run dir>`, which continues it with its saved configuration,
repeating no finished candidate and no LLM call. `autotune run -m key=a,b` sweeps (Hydra multirun;
launchers in conf/hydra/launcher/, the jobs' fates in autotune/run/sweep.py).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime as dt
import enum
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from autotune import env, targets, text
from autotune.config import as_dict
from autotune.errors import UserError
from autotune.ledger import Ledger
from autotune.records import amdahl_gain
from autotune.text import pct

if TYPE_CHECKING:
    from autotune.records import Hotspot

console = text.console(highlight=False)
_PUBLISH = threading.Lock()
STOP_GRACE_S = 10  # after Ctrl-C or SIGTERM, how long the searches get to notice before the process leaves
SUPERVISED = "AUTOTUNE_SWEEP_JOB"  # set in a sweep job's child process (see supervise)


class OutcomeStatus(str, enum.Enum):
    """What became of a target (a str enum: the ledger and summary.json hold its value)."""

    PROPOSED = "proposed"
    ALREADY_MERGED = "already_merged"  # the best kernel is one a reviewer approved before: nothing new to review
    ALREADY_REJECTED = "already_rejected"  # ... or rejected before (its reason stands)
    NO_PASSING_CANDIDATE = "no_passing_candidate"
    FAILED_MODEL_CHECK = "failed_model_check"
    SKIPPED = "skipped"

    def __str__(self) -> str:  # the value in f-strings and tables, on every Python version
        return self.value


@dataclasses.dataclass
class Outcome:
    """What became of one target in this run."""

    target: str
    status: OutcomeStatus
    detail: str
    best: str | None = None  # the best candidate's id
    verdict: str | None = None
    proposal: str | None = None  # the proposal id
    pr_url: str | None = None

    def __post_init__(self):
        self.status = OutcomeStatus(self.status)  # a resumed run reads it back from the ledger as text


def main(cfg: DictConfig) -> int:
    """One run; 0 when it finished, 1 when it died (its records stay, and it says how to resume it)."""
    from hydra.core.hydra_config import HydraConfig

    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    cfg = start(cfg, run_dir)
    if str(hydra_cfg.mode).endswith("MULTIRUN") and not os.environ.get(SUPERVISED):
        return supervise(run_dir)
    main_thread = threading.current_thread() is threading.main_thread()  # (signal handlers live there only)
    previous = signal.signal(signal.SIGTERM, _terminated) if main_thread else None  # a scheduler's "stop now"
    try:
        return _run(cfg, run_dir)
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: every isolated process is gone; what is done is recorded
        return stopped(run_dir, e)
    except Exception as e:  # noqa: BLE001 (an endpoint down, a full disk: keep the records, say how to go on)
        return died(run_dir, f"{type(e).__name__}: {e}")
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


class Terminated(KeyboardInterrupt):
    """SIGTERM reached the run (a cluster scheduler, `kill`): it stops as on Ctrl-C, with exit status 143."""


def _terminated(signum, frame) -> None:
    raise Terminated()


def stopped(run_dir: Path, why: KeyboardInterrupt) -> int:
    """The run was told to stop: no isolated process is left (stop_all), the searches are halted, the ledger holds
    every verdict reached; record it, print the command that continues, and leave with 130 (Ctrl-C) or 143."""
    from autotune.sandbox import stop_all

    stop_all()
    name = "SIGTERM" if isinstance(why, Terminated) else "SIGINT (Ctrl-C)"
    died(run_dir, f"stopped by {name}", heading="run stopped")
    code = 143 if isinstance(why, Terminated) else 130
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.stdout.flush()  # a search thread still in an LLM request: nothing of it is left to record
        sys.stderr.flush()
        os._exit(code)
    return code


def _run(cfg: DictConfig, run_dir: Path) -> int:
    from autotune.engine.selfopt import engine_session
    from autotune.run.progress import Progress, ProgressLedger

    names = list(cfg.targets) if cfg.targets else []
    budget = cfg.agent.get("budget", {}) or {}
    with engine_session(cfg, run_dir) as engine:  # engine=vllm|sglang: one live server for the run, else None
        with Progress([str(n) for n in names], budget.get("wall_s"), run_dir, console,
                      worker=writer(cfg.agent)) as progress:
            ledger = ProgressLedger(run_dir / "ledger.jsonl", progress)
            progress.seed(ledger.read())
            hotspots = engine.profile(cfg, run_dir, ledger) if engine else profile_stage(cfg, run_dir, ledger)
            outcomes, errors = work_on_all(choose_targets(cfg, hotspots), hotspots, cfg, run_dir, ledger, progress)
        if errors:
            return died(run_dir, "; ".join(errors))
        summary = write_summary(cfg, run_dir, ledger, outcomes)
        if engine:  # the agent's own serving figures before and after its kernels
            summary = write_summary(cfg, run_dir, ledger, outcomes, engine.after(
                cfg, run_dir, ledger, outcomes, summary["accounting"]))
    print_summary(summary, run_dir)
    return 0


def supervise(run_dir: Path) -> int:
    """A sweep's job runs as `autotune run resume=<its dir>` in a child process, so that a job killed by a
    signal (the OOM killer, a kill -9) takes neither the launcher's worker nor the other jobs with it: the
    worker records how the job died and the sweep goes on (joblib's process pool would otherwise break)."""
    child = subprocess.run([sys.executable, "-m", "autotune.cli", "run", f"resume={run_dir}",
                            "hydra.output_subdir=null"], env={**os.environ, SUPERVISED: "1"})
    if child.returncode < 0:
        return died(run_dir, f"killed by {signal.Signals(-child.returncode).name}")
    return 1 if child.returncode else 0  # a failed child recorded why and printed its resume command


def died(run_dir: Path, error: str, heading: str = "run failed") -> int:
    """Record why the run stopped (if the disk still takes it) and print the command that continues it."""
    try:
        Ledger(run_dir / "ledger.jsonl").append("failed", error=error)
        with open(run_dir / "cli.log", "a") as log:  # the same line the progress log has for a failure
            log.write(f"{dt.datetime.now():%Y-%m-%d %H:%M:%S,%f}"[:-3] + f" run: FAILED: {error}\n")
    except OSError:
        pass  # a full disk: the ledger holds everything up to the failure, which is what resume needs
    console.print(f"[bold red]{heading}[/]: {error}\nits records are in {run_dir}; continue it with:\n"
                  f"  autotune run resume={run_dir}", soft_wrap=True)
    return 1


def work_on_all(names: list[str], hotspots: dict, cfg: DictConfig, run_dir: Path, ledger: Ledger,
                progress) -> tuple[list[Outcome], list[str]]:
    """The targets side by side (a slow one holds no other back); the judges share verify.workers slots.
    A target that fails leaves no outcome record, so `resume=` takes it up again."""
    def one(name: str) -> Outcome:
        progress.started(name)
        try:
            return work_on(name, hotspot_of(hotspots, name), cfg, run_dir, ledger)
        except Exception as e:
            ledger.append("failed", target=name, error=f"{type(e).__name__}: {e}")
            raise

    outcomes: dict[str, Outcome] = {}
    errors: list[str] = []
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(len(names), 1))
    futures = {pool.submit(one, name): name for name in names}
    try:
        for future in concurrent.futures.as_completed(futures):
            if future.exception() is not None:
                errors.append(f"{futures[future]}: {type(future.exception()).__name__}: {future.exception()}")
            else:
                outcomes[futures[future]] = future.result()
    except BaseException:  # Ctrl-C, SIGTERM: the searches stop at their next turn; what they judged is in the ledger
        from autotune.agent.loop import INTERRUPTED
        from autotune.sandbox import stop_all

        INTERRUPTED.set()
        stop_all()  # the judges under way end now (their children are killed), and none starts
        pool.shutdown(wait=False, cancel_futures=True)
        concurrent.futures.wait(futures, timeout=STOP_GRACE_S)
        raise
    pool.shutdown()
    return [outcomes[n] for n in names if n in outcomes], errors


def start(cfg: DictConfig, run_dir: Path) -> DictConfig:
    """A new run: save the resolved config and environment. A resumed one: load the config it started with."""
    saved = run_dir / "config.yaml"
    if cfg.resume:
        if not saved.is_file():
            raise UserError(f"resume={cfg.resume}: no config.yaml there, so it is not an autotune run directory")
        loaded = OmegaConf.load(saved)
        if not isinstance(loaded, DictConfig):
            raise UserError(f"resume={cfg.resume}: its config.yaml is not a mapping, so it is not an autotune run")
        cfg = loaded
        cfg.resume = str(run_dir)
        console.print(f"[bold]resuming[/] {run_dir}")
        return cfg
    preflight(cfg)
    cfg = OmegaConf.create(as_dict(cfg))
    cfg.run_id = f"{dt.datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
    run_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, saved)
    (run_dir / "env.json").write_text(json.dumps(env.collect(cfg.labels).to_dict(), indent=2))
    console.print(f"[bold]run[/] {run_dir}")
    return cfg


def preflight(cfg: DictConfig, *, publish: bool = False) -> None:
    """Every input error a run would otherwise meet minutes in, found before any work starts and said in one
    message: settings left unset (???), agent settings missing or contradictory, an LLM endpoint that cannot be
    reached or does not serve agent.model, unknown targets, a missing
    trace, a checkpoint the sandboxed model check cannot read, and with `publish` a publish.repo that cannot
    take a proposal. `autotune run` calls it (with publish) before Hydra makes the run directory, so a refused
    run leaves nothing to resume; a sweep's job checks all but the repository when it starts (a job whose
    repository is fixed later resumes)."""
    from autotune.agent.clients import endpoint_problem, settings_problems
    from autotune.engine.selfopt import serves_the_run
    from autotune.run.model_check import unreadable_checkpoint

    problems = settings_problems(cfg.agent, engine_serves=serves_the_run(cfg))
    if not problems:  # the endpoint itself, asked now rather than after the profile and a search's retries
        problems.append(endpoint_problem(cfg.agent))
    unset = sorted(k for k in OmegaConf.missing_keys(cfg) if not k.startswith("agent."))
    problems += [f"{k} is not set (pass {k}=VALUE)" for k in unset]
    for name in cfg.targets:
        if str(name) not in targets.NAMES:
            problems.append(f"unknown target '{name}' (known targets: {', '.join(targets.NAMES)})")
    if cfg.trace and not Path(cfg.trace).is_file():
        problems.append(f"trace file {cfg.trace} not found "
                        "(give the path of a torch-profiler trace, .json or .json.gz)")
    problems.append(unreadable_checkpoint(cfg) or "")
    if publish:
        problems.append(_publish_problem(cfg))
    problems = [p for p in problems if p]
    if problems:
        raise UserError("; ".join(problems) + " (nothing was run)")


def _publish_problem(cfg: DictConfig) -> str:
    """Why a proposal could not be published into publish.repo (not a git checkout, no commits, no base branch,
    no GitHub token), or ""."""
    from autotune.publish import gitops

    try:
        gitops.base_commit(gitops.open_repo(cfg.publish.repo), str(cfg.publish.base))
    except UserError as e:
        return str(e)
    if cfg.publish.backend == "github":
        from autotune.publish.github import upstream_gaps

        refused = upstream_gaps(cfg)
        if refused:
            return refused
    if cfg.publish.backend == "github" and not os.environ.get(str(cfg.publish.token_env), "").strip():
        return (f"no GitHub token: the environment variable {cfg.publish.token_env} is empty or unset (export it, "
                "or name another with publish.token_env=VAR)")
    return ""


def profile_stage(cfg: DictConfig, run_dir: Path, ledger: Ledger) -> dict:
    """The hot spots of this run: a profile taken now (or read from `trace`), or the one a resumed run took."""
    from autotune.profile import latest_hotspots, profile_serving, profile_trace

    out_dir = run_dir / "profile"
    hotspots = latest_hotspots(out_dir)
    if hotspots is not None:
        return hotspots
    pcfg = cfg.copy()
    pcfg.profile.out_dir = str(out_dir)
    result = profile_trace(pcfg, cfg.trace) if cfg.trace else profile_serving(pcfg)
    from autotune.profile import hotspots_in

    ledger.append("profile", run_dir=str(result.run_dir.relative_to(run_dir)), serve=result.serve_report,
                  hotspots=[h.summary() for h in hotspots_in(result.hotspots)])
    return result.hotspots


def hotspot_of(hotspots: dict, name: str) -> Hotspot | None:
    from autotune.profile import hotspot_for

    return hotspot_for(name, hotspots)


def choose_targets(cfg: DictConfig, hotspots: dict) -> list[str]:
    """`targets=[...]` as given (checked), else the profiled targets above `run.min_share`, hottest first."""
    if cfg.targets:
        return [str(t) for t in cfg.targets]
    from autotune.profile import hotspots_in

    names = [h.target for h in hotspots_in(hotspots)
             if h.target in targets.NAMES and h.share >= float(cfg.run.min_share)]
    if not names:
        console.print(f"no target takes {cfg.run.min_share:.0%} of serving time or more: nothing to do "
                      "(lower run.min_share, or name targets=[...])")
    return names


def work_on(name: str, hotspot: Hotspot | None, cfg: DictConfig, run_dir: Path, ledger: Ledger) -> Outcome:
    """Agent and checker, then the model-level check, then publish: one target, start to end."""
    from autotune.agent import search_target
    from autotune.agent.loop import INTERRUPTED, missing_from_trace
    from autotune.agent.prompts import incumbent_from
    from autotune.publish import merged_kernel, rejection_reasons
    from autotune.run.model_check import never_called
    from autotune.sandbox import Stopped

    done = [r for r in ledger.read("outcome") if r["target"] == name]
    if done:  # a resumed run: this target was finished before the interruption
        return Outcome(**{k: v for k, v in done[-1].items() if k in Outcome.__dataclass_fields__})
    console.rule(f"[bold]{name}[/]")
    if hotspot is None and not cfg.trace:  # the profile was of this very model: it never reached the op
        outcome = Outcome(name, OutcomeStatus.SKIPPED, never_called(cfg, name) + "; no search was run")
        console.print(f"[yellow]skipped[/]: {outcome.detail}")
        ledger.append("outcome", **dataclasses.asdict(outcome))
        return outcome
    missing = missing_from_trace(cfg, hotspot)
    if missing:
        console.print(f"[yellow]note[/]: {name}: {missing} The agent is given its default shapes.")
    merged = merged_kernel(cfg, name)  # the one to beat: the agent is shown it, not left to write it again
    search = search_target(targets.get(name), hotspot, cfg, run_dir, ledger, rejections=rejection_reasons(cfg, name),
                           incumbent=incumbent_from(merged, str(cfg.publish.base)) if merged else None)
    if INTERRUPTED.is_set():  # the search ended because the run was told to stop: no outcome, `resume=` goes on
        raise Stopped(f"{name}: stopped during its search")
    best = search.best
    if best is None or not best.passed:
        outcome = Outcome(name, OutcomeStatus.NO_PASSING_CANDIDATE, search.stopped, best.id if best else None,
                          best.status if best else None)
    else:
        outcome = check_and_publish(name, best, hotspot, cfg, run_dir, ledger)
    ledger.append("outcome", **dataclasses.asdict(outcome))
    return outcome


def check_and_publish(name: str, best, hotspot: Hotspot | None, cfg: DictConfig, run_dir: Path,
                      ledger: Ledger) -> Outcome:
    from autotune.publish import ProposalRequest, ProposalStatus, publish
    from autotune.run.model_check import check_model

    source = Path(best.path).read_text()
    console.print(f"best: {best.id} ({best.status}); checking it inside the whole model ...")
    check = check_model(cfg, name, source, workdir=run_dir / "model_check" / best.id)
    ledger.append("model_check", target=name, candidate=best.id, **check.to_dict())
    if not check.passed:
        return Outcome(name, OutcomeStatus.FAILED_MODEL_CHECK, check.reason, best.id, best.status)
    environment = json.loads((run_dir / "env.json").read_text())
    request = ProposalRequest(
        target=name, source=source, verdict=best.verdict, hotspot=hotspot, model_check=check.to_dict(),
        candidate={**{k: getattr(best, k) for k in ("id", "agent", "model", "turn", "prompt_tokens", "cached_tokens",
                                                    "completion_tokens", "cost_usd")}, "spent": _spent(ledger, name)},
        environment=environment, run_dir=str(run_dir), run_id=str(cfg.run_id), engine_bench=_bench_of(source, cfg))
    with _PUBLISH:  # targets finish side by side; their branches go into one repository one at a time
        proposal = publish(request, cfg)
    if proposal.status is ProposalStatus.APPROVED:  # the same source, decided before: announced as what it is
        return Outcome(name, OutcomeStatus.ALREADY_MERGED, f"the same kernel is already merged as {proposal.id} "
                       f"(merge commit {(proposal.merge_commit or '')[:10]}): nothing new to review", best.id,
                       best.status, proposal.id)
    if proposal.status is ProposalStatus.REJECTED:
        return Outcome(name, OutcomeStatus.ALREADY_REJECTED, f"the same kernel was rejected before as {proposal.id}: "
                       f"{proposal.reason}", best.id, best.status, proposal.id)
    ledger.append("proposal", candidate=best.id, **dataclasses.asdict(proposal))
    return Outcome(name, OutcomeStatus.PROPOSED, check.reason, best.id, best.status, proposal.id, proposal.pr_url)


def _spent(ledger: Ledger, name: str) -> dict[str, Any]:
    """All the LLM requests the target's search made in this run (a resumed run's earlier ones too): what the
    kernel cost, failed attempts included."""
    llm = [r for r in ledger.read("llm") if r.get("target") == name]
    return {"requests": len(llm), "tokens": sum(int(r.get("prompt_tokens") or 0) + int(r.get("completion_tokens") or 0)
                                                for r in llm),
            "cost_usd": round(sum(float(r.get("cost_usd") or 0.0) for r in llm), 6)}


def _bench_of(source: str, cfg: DictConfig) -> dict | None:
    from autotune.engine.bench import bench_for_kernel

    return bench_for_kernel(source, cfg.bench.out_dir) if cfg.get("bench") else None


def _triage(proposals: dict[str, dict], o: Outcome) -> dict[str, Any]:
    """What a reviewer triages a proposal by, from its ledger record (`proposals`: id -> the newest record): the
    target's share of serving time, the measured speedup (None: not measured), the gain projected from it (None
    without one) and the evidence page."""
    record = proposals.get(o.proposal or "")
    if record is None:
        return {}
    share, speedup = record.get("share"), record.get("speedup")
    return {"share": share, "speedup": speedup, "evidence": record.get("evidence_path"),
            "projected_gain": amdahl_gain(share, speedup) if share is not None and speedup else None}


def write_summary(cfg: DictConfig, run_dir: Path, ledger: Ledger, outcomes: list[Outcome],
                  engine: dict | None = None) -> dict[str, Any]:
    from autotune.agent import summarize

    records = ledger.read()
    proposals = {str(r.get("id")): r for r in records if r.get("kind") == "proposal"}  # the newest of each wins
    summary = {"run_id": cfg.run_id, "run_dir": str(run_dir), "agent": cfg.agent.name,
               "model": cfg.model.name, "device": env.resolve_device(cfg.device),
               "outcomes": [dataclasses.asdict(o) | _triage(proposals, o) for o in outcomes],
               "accounting": summarize(records)}
    if engine is not None:
        summary["engine"] = engine  # autotune/engine/selfopt.py: the engine that served the agent, before/after
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary


def print_summary(summary: dict[str, Any], run_dir: Path) -> None:
    console.rule(f"[bold]run {summary['run_id']}[/]")
    # proposals first, the largest share of serving time first: a reviewer's triage order
    for o in sorted(summary["outcomes"], key=lambda o: (o["status"] != OutcomeStatus.PROPOSED, -(o.get("share") or 0))):
        head = (f"proposed {o['pr_url'] or o['proposal']}" if o["status"] == OutcomeStatus.PROPOSED
                else o["status"].replace("_", " ") + (f" as {o['proposal']}" if o["proposal"] else ""))
        console.print(f"[bold]{o['target']}[/]: {head}")
        if "share" in o:  # a proposal: what a reviewer triages by, first
            speed = f"{o['speedup']:.2f}x" if o["speedup"] else "not measured (no GPU)"
            gain = f", projected end-to-end gain {pct(o['projected_gain'])}" if o["projected_gain"] is not None else ""
            share = pct(o["share"]) if o["share"] is not None else "unknown (no profile)"
            console.print(f"  share of serving time {share}, speedup {speed}{gain}, state open; evidence "
                          f"{o['evidence']}", soft_wrap=True)
        best = f"best {o['best']} ({o['verdict']}); " if o["best"] else ""
        console.print(f"  {best}{o['detail']}")
    console.print(accounting_line(summary["agent"], summary["accounting"]))
    if summary.get("engine"):
        from autotune.engine.selfopt import summary_lines

        for line in summary_lines(summary["engine"]):
            console.print(line, soft_wrap=True)
    console.print(f"files: {run_dir}")
    proposed = sorted((o for o in summary["outcomes"] if o["status"] == OutcomeStatus.PROPOSED),
                      key=lambda o: -(o.get("share") or 0))
    if proposed:
        first = proposed[0]["proposal"]
        unmeasured = " --unmeasured" if proposed[0]["verdict"] == "unmeasured" else ""  # merged only if asked
        console.print(f"review what was proposed ({', '.join(o['proposal'] for o in proposed)}):\n"
                      f"  autotune review list\n  autotune review show {first}\n"
                      f"  autotune review approve {first}{unmeasured}\n  autotune review reject {first} --reason TEXT")


def writer(agent: DictConfig) -> str:
    """Who writes the candidates, as the run's log names it."""
    name = str(agent.get("name") or "search")
    if name == "openai":
        return f"the LLM agent (model {agent.get('model') or 'the engine serves'})"
    if name == "replay":
        return "the replay of a recorded LLM agent"
    return "the search baseline (templates, no LLM)"


def accounting_line(agent: str, acc: dict[str, Any]) -> str:
    """What the agent spent, per kernel, and how much of it went to failed attempts and retries: the figures
    that say whether the loop pays. Shares are cut, never rounded up (autotune.text.pct)."""
    kernels = acc.get("kernels_accepted") or acc.get("kernels_passing") or 0
    basis = acc.get("per_kernel_basis") or "kernel"
    line = f"agent {agent}: {acc.get('requests', 0)} LLM requests, {acc.get('tokens', 0):,} tokens"
    if acc.get("cache_hit_rate") is not None:
        line += f" ({pct(acc['cache_hit_rate'])} of prompt tokens cached)"
    unpriced = bool(acc.get("tokens")) and not acc.get("dollars")  # tokens at no cost: agent.price is all zero
    if acc.get("tokens"):  # no tokens, no dollars to speak of
        line += ", dollars not counted (agent.price is not set)" if unpriced else f", ${acc.get('dollars', 0):.4f}"
    line += f"; {kernels} {basis} kernel(s)"
    if kernels and acc.get("tokens"):
        line += f", {acc.get('tokens_per_kernel', 0):,.0f} tokens" + (
            " each" if unpriced else f" and ${acc.get('dollars_per_kernel', 0):.4f} each")
    if acc.get("attempts"):
        line += (f"; {acc.get('failed_attempts', 0)} of {acc['attempts']} attempts failed, "
                 f"{acc.get('retries', 0)} were retries")
        spent = [f"{pct(acc[k])} of {what}" for k, what in (("failed_token_share", "tokens"),
                 ("failed_dollar_share", "dollars"), ("failed_wall_share", "wall time")) if acc.get(k) is not None]
        if spent:
            line += f"; failed attempts took {', '.join(spent)}"
        if acc.get("retry_token_share") is not None:
            line += f"; retries {pct(acc['retry_token_share'])} of tokens"
    return line
