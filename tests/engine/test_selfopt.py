"""The self-optimising run's pieces that need no live server: the run's passing kernels as a plugin, the agent's
own figures from its transcript, the summary's lines (the live run is tests/engine/test_live.py)."""

import json

from autotune.engine.launch import plugin_kernels
from autotune.engine.selfopt import EngineSession, agent_live, summary_lines
from autotune.engine.settings import EngineSettings
from autotune.engine.stats import LoadReport, RequestResult
from autotune.run import Outcome, OutcomeStatus
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
