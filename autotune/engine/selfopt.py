"""The model optimising its own inference: `autotune run engine=vllm ... agent=openai`, the agent's LLM served by
the engine it tunes.

    autotune run engine=vllm engine.launch=true engine.model=PATH engine.python=PATH agent=openai \
        workload=agent workload.transcript=runs/<an earlier run>/transcript.jsonl

For the whole run one server is up (engine.url, or launched once); with agent=openai and no agent.base_url the
agent talks to it (its /v1, the served model's name). The run:
1. profiles the engine under the workload (workload=agent: an earlier agent run's own requests) and works on
   that traffic's hot spots, as with any profile; the ledger's `profile` record carries the client's figures;
2. the agent writes kernels, every request served by the engine (transcript.jsonl);
3. at the end, the agent's own traffic of this run (its transcript) is replayed on the engine as it is (A), and,
   when kernels passed the checker and the server was launched, on the engine restarted with them as a plugin
   (B): the agent's serving figures before and after, side by side (the bench's table), with the tokens and
   dollars the agent spent per kernel. They go to summary.json ("engine") and the ledger (`engine_serving`).
On a CPU the kernels run under the Triton interpreter, so "after" is slower there; the figures say so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from autotune.agent.clients import unset
from autotune.engine.bench import SetupRun, compare, greedy_outputs, outputs_differ
from autotune.engine.launch import Server, serving
from autotune.engine.profile import environment_record, measure, measure_profiled
from autotune.engine.settings import EngineSettings
from autotune.engine.stats import LoadReport


def serves_the_run(cfg: DictConfig) -> bool:
    """Whether a live engine serves this run (engine=vllm|sglang and no trace given): then it is also the endpoint
    of an agent=openai that names none."""
    return EngineSettings.of(cfg.get("engine")).live and not cfg.get("trace")


@contextlib.contextmanager
def engine_session(cfg: DictConfig, run_dir: Path) -> Iterator[EngineSession | None]:
    """The engine for a whole run (None for the built-in one); it points an unset agent.base_url at the server."""
    if not serves_the_run(cfg):
        yield None
        return
    settings = EngineSettings.of(cfg.get("engine"))
    with serving(settings, Path(run_dir) / "engine") as server:
        agent = cfg.agent
        if agent.get("name") == "openai" and unset(agent, "base_url"):
            agent.base_url = server.url + "/v1"
        if agent.get("name") == "openai" and unset(agent, "model"):
            agent.model = server.model
        yield EngineSession(settings, server)


@dataclasses.dataclass
class EngineSession:
    settings: EngineSettings
    server: Server

    def profile(self, cfg: DictConfig, run_dir: Path, ledger) -> dict:
        """The engine profiled under the workload: the hot spots of its traffic (a resumed run's, when it has one)."""
        from autotune.profile import hotspots_in, latest_hotspots
        from autotune.profile.profiler import profile_trace

        out_dir = Path(run_dir) / "profile"
        found = latest_hotspots(out_dir)
        if found is not None:
            return found
        pcfg = cfg.copy()
        pcfg.profile.out_dir = str(out_dir)
        report, trace = measure_profiled(pcfg, self.server)
        result = profile_trace(pcfg, trace, environment=environment_record(cfg, self.server),
                               load_report=report.to_dict())
        ledger.append("profile", run_dir=str(result.run_dir.relative_to(run_dir)), serve=None,
                      load=report.to_dict(with_requests=False), engine=self.server.record(),
                      hotspots=[h.summary() for h in hotspots_in(result.hotspots)])
        return result.hotspots

    def after(self, cfg: DictConfig, run_dir: Path, ledger, outcomes: list, accounting: dict) -> dict[str, Any]:
        """The agent's own traffic of this run replayed before and after its kernels (see the module doc)."""
        run_dir = Path(run_dir)
        transcript = run_dir / "transcript.jsonl"
        record: dict[str, Any] = {"engine": self.server.record(), "agent_live": agent_live(transcript),
                                  "cost_per_kernel": {k: accounting.get(k) for k in (
                                      "tokens_per_kernel", "dollars_per_kernel", "kernels_accepted",
                                      "kernels_passing", "per_kernel_basis")}}
        if not record["agent_live"]["requests"]:
            record["note"] = "the agent sent no request to the engine (agent=openai with the engine's URL serves it)"
            ledger.append("engine_serving", **record)
            return record
        rcfg = replay_cfg(cfg, transcript)
        before = SetupRun("before", self.settings)
        before.reports.append(measure(rcfg, self.server, profiled=False)[0])
        before.outputs = greedy_outputs(self.server, int(cfg.bench.prompts), int(cfg.bench.max_tokens))
        record["before"] = before.reports[0].to_dict(with_requests=False)
        plugin, why = self._plugin(run_dir, outcomes)
        if plugin is None:
            record["after"], record["note"] = None, why
        else:
            after = SetupRun("after", self.settings.with_overrides({"plugin": str(plugin), "port": None}))
            with serving(after.settings, run_dir / "engine" / "after") as server:
                after.reports.append(measure(rcfg, server, profiled=False)[0])
                after.outputs = greedy_outputs(server, int(cfg.bench.prompts), int(cfg.bench.max_tokens))
            record["after"] = after.reports[0].to_dict(with_requests=False)
            record["comparison"] = compare(before, after, None)
            record["outputs_identical"] = not outputs_differ(before.outputs, after.outputs)
            record["kernels"] = json.loads((plugin / "autotune_vllm_kernels" / "manifest.json").read_text())["kernels"]
        ledger.append("engine_serving", **record)
        return record

    def _plugin(self, run_dir: Path, outcomes: list) -> tuple[Path | None, str]:
        """This run's passing kernels exported as a vLLM plugin, or why there is none to serve with."""
        passed = [o for o in outcomes if o.status == "proposed"]
        if not passed:
            return None, "no kernel of this run passed the checker and the model check: nothing to serve with"
        if not (self.settings.launch and self.settings.name == "vllm"):
            return None, "the kernels can be served only by a vLLM this run launched (engine.launch=true)"
        from autotune.export.bundle import VLLM, write_package

        kernels_dir = run_dir / "engine" / "kernels"
        for o in passed:
            folder = kernels_dir / o.target / o.best
            folder.mkdir(parents=True, exist_ok=True)
            index, turn = _slot_of(o.best)
            shutil.copyfile(run_dir / "candidates" / o.target / f"c{index}_t{turn}.py", folder / "kernel.py")
            (folder / "provenance.json").write_text(json.dumps({"target": o.target, "verdict": {"status": o.verdict},
                                                                "created_at": "this run"}))
        try:
            exported = write_package(VLLM, kernels_dir, run_dir / "engine" / "plugin")
        except Exception as e:  # noqa: BLE001 (any failure to export is reported, the run goes on)
            return None, f"the kernels could not be exported as a vLLM plugin: {e}"
        return exported.out, ""


def replay_cfg(cfg: DictConfig, transcript: Path) -> DictConfig:
    rcfg = cfg.copy()
    rcfg.workload = OmegaConf.create({"name": "agent", "transcript": str(transcript), "output_tokens": "recorded",
                                      "arrival": {"mode": "chains"}, "num_requests": None})
    return rcfg


def agent_live(transcript: Path) -> dict[str, Any]:
    """The agent's requests as its client timed them while the engine served it (no stream: end to end only)."""
    from autotune import ledger as ledger_mod
    from autotune.serve.report import Latency

    live = [r for r in ledger_mod.read(transcript) if r.get("kind") == "exchange" and r.get("source") == "live"]
    latency = [1e3 * float(r.get("latency_s") or 0.0) for r in live]
    tokens = sum(int((r.get("usage") or {}).get("completion_tokens") or 0) for r in live)
    seconds = sum(float(r.get("latency_s") or 0.0) for r in live)
    return {"requests": len(live), "completion_tokens": tokens, "e2e_ms": dataclasses.asdict(Latency.of(latency)),
            "tokens_per_s_per_request": tokens / seconds if seconds > 0 else None}


def summary_lines(record: dict[str, Any]) -> list[str]:
    """What the run's summary prints about the engine that served the agent."""
    live = record.get("agent_live") or {}
    lines = [f"engine {record['engine'].get('name')} {record['engine'].get('version')}: served the agent's "
             f"{live.get('requests', 0)} requests ({live.get('completion_tokens', 0)} completion tokens)"]
    for label in ("before", "after"):
        report = record.get(label)
        if report:
            r = LoadReport.from_dict(report)
            lines.append(f"  its traffic replayed {label} this run's kernels: {r.output_tokens_per_s:.1f} output "
                         f"tokens/s, TTFT p50 {_ms(r.ttft_ms.p50)}, TPOT p50 {_ms(r.tpot_ms.p50)}, "
                         f"{r.failed}/{r.num_requests} failed")
    if record.get("outputs_identical") is not None:
        lines.append(f"  greedy outputs {'identical' if record['outputs_identical'] else 'DIFFER'} with the kernels")
    if record.get("note"):
        lines.append(f"  {record['note']}")
    return lines


def _ms(value) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def _slot_of(candidate_id: str) -> tuple[str, str]:
    """(index, turn) of a candidate id as the loop writes it: <target>-c<index>-t<turn>."""
    m = re.search(r"-c(\d+)-t(\d+)$", candidate_id)
    if m is None:
        raise ValueError(f"not a candidate id of the loop: {candidate_id}")
    return m.group(1), m.group(2)
