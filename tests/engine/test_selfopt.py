"""The self-optimising run's pieces that need no live server: the run's passing kernels as a plugin, the agent's
own figures from its transcript, the summary's lines (the live run is tests/engine/test_live.py)."""

import json

from autotune.engine.launch import plugin_kernels
from autotune.engine.selfopt import EngineSession, agent_live, summary_lines
from autotune.engine.settings import EngineSettings
from autotune.engine.stats import LoadReport, RequestResult
from autotune.run.loop import Outcome, OutcomeStatus
from tests.export.conftest import CORRECT


def test_the_runs_proposed_kernels_become_a_plugin_and_the_rest_stay_out(tmp_path):
    run_dir = tmp_path / "run"
    for target in ("rms_norm", "silu_and_mul"):
        folder = run_dir / "candidates" / target
        folder.mkdir(parents=True)
        (folder / "c0_t2.py").write_text(CORRECT[target].read_text())
    outcomes = [Outcome("rms_norm", OutcomeStatus.PROPOSED, "ok", "rms_norm-c0-t2", "unmeasured", "rms_norm-1"),
                Outcome("silu_and_mul", OutcomeStatus.NO_PASSING_CANDIDATE, "none", "silu_and_mul-c0-t2", "incorrect")]
    launched = EngineSettings(name="vllm", launch=True, python=__import__("sys").executable, model="m")
    plugin, why = EngineSession(launched, None)._plugin(run_dir, outcomes)
    assert why == "" and plugin_kernels(str(plugin)) == ["rms_norm"]
    served = (plugin / "autotune_vllm_kernels" / "kernels" / "rms_norm.py").read_text()
    assert served == CORRECT["rms_norm"].read_text()
    attached = EngineSettings(name="vllm", url="http://127.0.0.1:1")
    assert "launched" in EngineSession(attached, None)._plugin(run_dir, outcomes)[1]
    assert "no kernel" in EngineSession(launched, None)._plugin(run_dir, outcomes[1:])[1]


def test_the_agents_live_figures_and_the_summary_lines(tmp_path):
    transcript = tmp_path / "transcript.jsonl"
    rows = [{"kind": "exchange", "source": "live", "latency_s": s, "usage": {"completion_tokens": n}}
            for s, n in ((2.0, 40), (4.0, 80))] + [{"kind": "exchange", "source": "transcript", "latency_s": 9.0}]
    transcript.write_text("".join(json.dumps(r) + "\n" for r in rows))
    live = agent_live(transcript)
    assert live["requests"] == 2 and live["completion_tokens"] == 120 and live["tokens_per_s_per_request"] == 20.0
    assert live["e2e_ms"]["p50"] == 3000.0
    before = LoadReport.of([RequestResult(0, 0.0, 5, 4, (0.2, 0.3, 0.4, 0.5))], 0.5).to_dict(with_requests=False)
    lines = summary_lines({"engine": {"name": "vllm", "version": "0.32.0"}, "agent_live": live, "before": before,
                           "after": None, "note": "no kernel of this run passed"})
    assert lines[0] == "engine vllm 0.32.0: served the agent's 2 requests (120 completion tokens)"
    assert "replayed before this run's kernels: 8.0 output tokens/s, TTFT p50 200.0 ms" in lines[1]
    assert lines[-1].strip() == "no kernel of this run passed"


def test_the_report_shows_the_agents_traffic_before_and_after_on_its_engine(tmp_path):
    from autotune.ledger import Ledger
    from autotune.report.build import build
    from tests.report.test_report import CPU_ENV, make_run

    d = make_run(tmp_path / "runs" / "0", temperature=0.0, env=CPU_ENV, candidates=[(0, 1, "unmeasured", None)],
                 llm=[(0, 1, 1000, 900, 50, 0.0)])
    report = lambda tok_s, ttft: {"output_tokens_per_s": tok_s, "ttft_ms": {"p50": ttft}, "tpot_ms": {"p50": 5.0}}
    Ledger(d / "ledger.jsonl").append(
        "engine_serving", engine={"name": "vllm", "version": "0.32.0"}, agent_live={"requests": 3, "e2e_ms": {"p50": 700.0}},
        before=report(30.0, 170.0), after=report(0.8, 5000.0), outputs_identical=True,
        cost_per_kernel={"tokens_per_kernel": 1950.0, "dollars_per_kernel": 0.0})
    build([tmp_path / "runs"], tmp_path / "report")
    table = __import__("pandas").read_csv(tmp_path / "report" / "engine_serving.csv")
    row = table.iloc[0]
    assert (row["engine"], row["agent_requests"], row["before_tok_s"], row["after_tok_s"]) == ("vllm 0.32.0", 3, 30.0, 0.8)
    assert row["after_ttft_p50_ms"] == 5000.0 and row["tokens_per_kernel"] == 1950.0 and bool(row["outputs_identical"])
    assert "The engine that served the agent" in (tmp_path / "report" / "report.md").read_text()


def test_a_run_the_engine_serves_takes_the_agents_endpoint_from_it_and_a_run_without_one_is_refused():
    import pytest

    from autotune.config import compose
    from autotune.errors import UserError
    from autotune.run.loop import preflight

    served = ["agent=openai", "engine=vllm", "engine.url=http://127.0.0.1:1"]
    preflight(compose(served))  # agent.base_url and agent.model are the engine's, filled in when it is up
    for overrides in (["agent=openai"], [*served, "trace=t.json"]):  # no engine, or a trace instead of its traffic
        with pytest.raises(UserError, match="agent.base_url is not set"):
            preflight(compose(overrides))
