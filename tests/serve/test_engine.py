"""The serving engine: a mixed stream served to completion, unchanged by batching, with sane latencies."""

import itertools

import pytest
import torch

from autotune.errors import UserError
from autotune.serve import Engine, Request, ServeReport, greedy_generate, print_report


def mixed_requests(n=10, seed=0, spread_s=0.06, after=None):
    gen = torch.Generator().manual_seed(seed)
    requests = []
    for i in range(n):
        prompt_len = int(torch.randint(1, 41, (1,), generator=gen))
        output_len = int(torch.randint(1, 13, (1,), generator=gen))
        prompt = torch.randint(0, 512, (prompt_len,), generator=gen).tolist()
        requests.append(Request(i, prompt, output_len, arrival_s=0.0 if after else spread_s * i / n,
                                after=after(i) if after else None))
    return requests


def in_flight_at_most(report, limit):
    """No moment where more than `limit` requests were between arrival and finish."""
    events = sorted([(r.arrival_s, 1) for r in report.requests] + [(r.finish_s, -1) for r in report.requests],
                    key=lambda e: (e[0], e[1]))
    level = peak = 0
    for _, delta in events:
        level += delta
        peak = max(peak, level)
    return peak <= limit


class Recording:
    """The model, with the segments of every step it ran kept in `steps`."""

    def __init__(self, model):
        self.model, self.config, self.new_cache, self.steps = model, model.config, model.new_cache, []

    def __call__(self, segments, cache):
        self.steps.append(segments)
        return self.model(segments, cache)


@pytest.fixture(scope="module")
def served(tiny):
    """10 requests of 1-40 prompt and 1-12 output tokens over 60 ms, served in real time; 3 slots and 32
    tokens per step force queueing, chunked prefill (prompts > 32) and decodes joined by prefills."""
    requests = mixed_requests()
    assert any(len(q.prompt) > 32 for q in requests)
    return requests, Engine(tiny, max_batch_size=3, max_batched_tokens=32).run(requests)


def test_steps_respect_the_limits_and_mix_prefill_with_decodes(tiny):
    """The same stream on a clock that ticks 2 ms per reading, so the schedule does not depend on CPU load."""
    ticks = itertools.count()
    model = Recording(tiny)
    engine = Engine(model, max_batch_size=3, max_batched_tokens=32, clock=lambda: 0.002 * next(ticks),
                    sleep=lambda s: None)
    report = engine.run(mixed_requests())
    assert len(model.steps) == report.steps
    for segments in model.steps:
        assert len({s.slot for s in segments}) == len(segments) <= 3
        assert sum(len(s.tokens) for s in segments) <= 32
    assert any(len(s.tokens) > 1 and s.start > 0 for seg in model.steps for s in seg)  # a prompt's later chunk
    assert any({len(s.tokens) == 1 for s in seg} == {True, False} for seg in model.steps)  # decodes + a prefill


def test_every_request_gets_exactly_its_tokens(served):
    requests, report = served
    assert report.num_requests == len(requests)
    assert [r.request_id for r in report.requests] == [q.request_id for q in requests]
    for request, stats in zip(requests, report.requests):
        assert stats.output_tokens == len(stats.tokens) == len(stats.token_times_s) == request.output_len
        assert stats.prompt_tokens == len(request.prompt)
    assert report.output_tokens == sum(q.output_len for q in requests)
    assert report.prompt_tokens == sum(len(q.prompt) for q in requests)


def test_batching_does_not_change_the_tokens(served, tiny):
    requests, report = served
    for request, stats in zip(requests, report.requests):
        alone, _ = greedy_generate(tiny, [list(request.prompt)], request.output_len)
        assert list(stats.tokens) == alone[0].tolist(), f"request {request.request_id}"


def test_latency_figures_are_sane(served):
    requests, report = served
    for request, r in zip(requests, report.requests):
        assert r.arrival_s == pytest.approx(request.arrival_s)
        assert r.arrival_s < r.first_token_s <= r.finish_s
        assert list(r.token_times_s) == sorted(r.token_times_s)
        assert 0 < r.ttft_ms <= r.e2e_ms
    for latency in (report.ttft_ms, report.e2e_ms, report.tpot_ms):
        assert 0 < latency.p50 <= latency.p95 <= latency.p99
    assert report.ttft_ms.p99 <= report.e2e_ms.p99
    assert report.wall_s >= max(r.finish_s for r in report.requests)
    assert report.output_tokens_per_s == pytest.approx(report.output_tokens / report.wall_s)
    assert report.steps >= max(q.output_len for q in requests)
    assert in_flight_at_most(report, len(requests))


def test_report_round_trips_and_prints(served):
    _, report = served
    assert ServeReport.from_dict(report.to_dict()) == report
    frame = report.requests_frame()
    assert list(frame["request_id"]) == list(range(report.num_requests))
    assert (frame["ttft_ms"] <= frame["e2e_ms"]).all()
    from rich.console import Console

    console = Console(record=True, width=100)
    print_report(report, console)
    text = console.export_text()
    assert "TTFT" in text and "TPOT" in text and f"{report.num_requests} requests" in text


def test_closed_loop_keeps_the_concurrency(tiny):
    """Two users: request i follows request i - 2 and arrives when it finishes."""
    requests = mixed_requests(n=6, seed=1, after=lambda i: i - 2 if i >= 2 else None)
    report = Engine(tiny, max_batch_size=4, max_batched_tokens=64).run(requests)
    by_id = {r.request_id: r for r in report.requests}
    for i in range(2, 6):
        assert by_id[i].arrival_s == by_id[i - 2].finish_s
    assert in_flight_at_most(report, 2)


def test_arrivals_wait_in_real_time_and_follow_time_scale(tiny):
    requests = [Request(0, [1, 2, 3], 2, arrival_s=0.0), Request(1, [4, 5], 2, arrival_s=1.0)]
    report = Engine(tiny, max_batch_size=2, max_batched_tokens=8, time_scale=10.0).run(requests)
    late = report.requests[1]
    assert late.arrival_s == pytest.approx(0.1)
    assert late.first_token_s >= 0.1  # it was not served before it arrived
    assert report.wall_s >= 0.1


def test_an_idle_engine_sleeps_until_the_next_arrival(tiny):
    """With a fake clock: nothing runs while the clock is before the arrival, and the sleep covers the gap."""
    now, slept = [0.0], []

    def sleep(s):
        slept.append(s)
        now[0] += s

    engine = Engine(tiny, max_batch_size=1, max_batched_tokens=4, clock=lambda: now[0], sleep=sleep)
    report = engine.run([Request(0, [7, 8], 3, arrival_s=5.0)])
    assert slept == [5.0]
    assert report.requests[0].first_token_s == 5.0 and report.steps == 3


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_batch_size=0), "max_batch_size"),
    (dict(max_batch_size=8, max_batched_tokens=4), "max_batched_tokens=4 is below"),
    (dict(time_scale=0.0), "time_scale"),
    (dict(block_size=0), "serve.block_size=0"),
    (dict(block_size=8), "a multiple of 16"),
])
def test_bad_engine_settings_are_user_errors(tiny, kwargs, message):
    with pytest.raises(UserError, match=message):
        Engine(tiny, **kwargs)


def test_bad_requests_are_refused(tiny):
    engine = Engine(tiny, max_batch_size=2, max_batched_tokens=16)
    with pytest.raises(UserError, match="workload has no requests"):
        engine.run([])
    with pytest.raises(ValueError, match="exceed model.max_seq_len"):
        engine.run([Request(0, [1] * 500, 20)])
    with pytest.raises(ValueError, match="vocabulary"):
        engine.run([Request(0, [512], 1)])
    with pytest.raises(ValueError, match="not an earlier request"):
        engine.run([Request(0, [1], 1, after=1), Request(1, [1], 1)])
    with pytest.raises(ValueError, match="output_len"):
        Request(0, [1], 0)
