"""The load generator and its statistics against a real local HTTP server that streams as OpenAI's API does."""

import json

import pytest

from autotune.engine.load import Endpoint, run_load
from autotune.engine.stats import LoadReport, RequestResult
from autotune.engine.workload import EngineRequest, agent_requests


def _requests(n, tokens=5, **kw):
    return [EngineRequest(i, tokens, prompt_ids=(1, 2, 3 + i), **kw) for i in range(n)]


def test_streamed_timings_are_measured_as_vllm_bench_serve_measures_them(fake):
    state, url = fake(first_s=0.08, token_s=0.03)
    results, duration = run_load(Endpoint(url, "tiny"), _requests(3))
    report = LoadReport.of(results, duration)
    assert report.failed == 0 and report.output_tokens == 15 and report.prompt_tokens == 9
    for r in results:
        assert len(r.chunk_s) == 5 and len(r.itl_ms) == 4 and r.text == "t0 t1 t2 t3 t4 "
        # the server waited 80 ms before the first chunk and 4 x 30 ms after it: never measured shorter (one gap
        # alone can be, when the client reads a chunk late and the next one on time)
        assert r.ttft_ms >= 80 and r.e2e_ms >= 80 + 4 * 30
    # TPOT is (e2e - TTFT) / (tokens - 1); the ITLs are the same gaps, one by one
    r = results[0]
    assert r.tpot_ms == pytest.approx((r.e2e_ms - r.ttft_ms) / 4) == pytest.approx(sum(r.itl_ms) / 4)
    assert report.ttft_ms.p50 >= 80 and report.tpot_ms.p95 < 300  # the 2-core machine is slow, not that slow
    assert report.output_tokens_per_s == pytest.approx(15 / duration)
    # every request carried what makes the lengths exact: max_tokens, ignore_eos, streaming with usage
    body = state.requests[0]["body"]
    assert (body["max_tokens"], body["ignore_eos"], body["stream"]) == (5, True, True)
    assert body["stream_options"] == {"include_usage": True}
    assert sorted(q["body"]["prompt"] for q in state.requests) == [[1, 2, 3], [1, 2, 4], [1, 2, 5]]
    assert LoadReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report


def test_failed_requests_count_in_the_error_rate_and_in_no_latency(fake):
    _, url = fake()
    requests = [EngineRequest(0, 5, prompt_ids=(1,)), EngineRequest(1, 13, prompt_ids=(1,)),  # HTTP 400
                EngineRequest(2, 7, prompt_ids=(1,)), EngineRequest(3, 4, prompt_ids=(1,))]  # 2: stream cut
    results, duration = run_load(Endpoint(url, "tiny"), requests)
    report = LoadReport.of(results, duration)
    assert report.failed == 2 and report.error_rate == 0.5 and report.output_tokens == 9
    errors = dict(report.errors)
    assert any(e.startswith("HTTP 400") and "unlucky" in e for e in errors)
    assert sum(errors.values()) == 2
    assert results[1].ttft_ms is None and results[2].tpot_ms is None
    assert report.ttft_ms.p50 is not None and len(report.table().rows) >= 5


def test_a_dead_server_is_every_request_failed_not_a_crash():
    results, duration = run_load(Endpoint("http://127.0.0.1:9", "tiny", timeout_s=5), _requests(2))
    report = LoadReport.of(results, duration)
    assert report.failed == 2 and "Connection" in report.errors[0][0]


def test_closed_loop_keeps_that_many_requests_in_flight_and_poisson_arrivals_are_kept(fake):
    state, url = fake(first_s=0.05, token_s=0.02)
    chained = [EngineRequest(i, 4, after=i - 2 if i >= 2 else None, prompt_ids=(1,)) for i in range(6)]
    run_load(Endpoint(url, "tiny"), chained)
    assert state.max_in_flight == 2 and len(state.requests) == 6
    spaced = [EngineRequest(i, 2, arrival_s=0.15 * i, prompt_ids=(1,)) for i in range(3)]
    results, _ = run_load(Endpoint(url, "tiny"), spaced)
    assert [r.sent_s >= 0.15 * r.request_id - 0.005 for r in results] == [True] * 3
    assert results[2].sent_s - results[0].sent_s == pytest.approx(0.3, abs=0.1)


def _exchange(target, index, turn, completion, ts, latency=1.0):
    return {"kind": "exchange", "ts": ts, "target": target, "index": index, "turn": turn, "latency_s": latency,
            "messages": [{"role": "system", "content": "write kernels"}, {"role": "user", "content": f"{target} {turn}"}],
            "params": {"max_tokens": 64, "temperature": 0.2}, "usage": {"completion_tokens": completion}}


def test_an_agent_transcript_replays_as_chat_requests_turn_after_turn(fake, tmp_path):
    transcript = tmp_path / "transcript.jsonl"
    rows = [_exchange("rms_norm", 0, 1, 6, "2026-12-01T10:00:01+00:00"),
            _exchange("silu_and_mul", 0, 1, 4, "2026-12-01T10:00:02+00:00"),
            _exchange("rms_norm", 0, 2, 200, "2026-12-01T10:00:09+00:00")]  # 200 > max_tokens 64
    transcript.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"kind": "other"}\n')
    requests = agent_requests({"transcript": str(tmp_path)})  # a run folder works as well as the file
    assert [(r.max_tokens, r.after, r.chat) for r in requests] == [(6, None, True), (4, None, True), (64, 0, True)]
    state, url = fake(first_s=0.05)
    results, _ = run_load(Endpoint(url, "tiny"), requests)
    assert all(r.ok for r in results) and [r.output_tokens for r in results] == [6, 4, 64]
    sent = {json.dumps(q["body"]["messages"]): q for q in state.requests}
    second_turn = sent[json.dumps(rows[2]["messages"])]
    first_done = next(t for i, t in state.finished if state.requests[i]["body"]["messages"] == rows[0]["messages"])
    assert second_turn["path"] == "/v1/chat/completions" and second_turn["at"] >= first_done
    assert second_turn["body"]["ignore_eos"] is True
    recorded = agent_requests({"transcript": str(transcript), "arrival": {"mode": "recorded"}})
    assert [r.arrival_s for r in recorded] == [0.0, 1.0, 8.0]  # start = record time - latency


def test_report_of_no_requests_and_of_results_read_back():
    empty = LoadReport.of([], 0.0)
    assert empty.error_rate == 0 and empty.ttft_ms.p50 is None and empty.output_tokens_per_s == 0
    r = RequestResult(0, 0.5, 3, 1, (0.9,))
    assert r.ttft_ms == pytest.approx(400) and r.tpot_ms is None and r.itl_ms == []
