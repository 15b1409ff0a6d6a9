"""The workload: length distributions, arrival modes, replayed traffic, clipping, and bad workloads."""

import json
import logging

import numpy as np
import pytest

from autotune.config import compose
from autotune.errors import UserError
from autotune.serve import make_requests


def workload(**fields):
    base = dict(num_requests=200, prompt_len={"dist": "fixed", "value": 8}, output_len={"dist": "fixed", "value": 4},
                arrival={"mode": "burst"}, replay=None, seed=0)
    return {**base, **fields}


def lengths(requests):
    return np.array([len(r.prompt) for r in requests]), np.array([r.output_len for r in requests])


def test_fixed_uniform_and_lognormal_lengths():
    fixed = make_requests(workload(), 512, 512)
    assert len(fixed) == 200 and set(lengths(fixed)[0]) == {8} and set(lengths(fixed)[1]) == {4}
    uniform = make_requests(workload(prompt_len={"dist": "uniform", "low": 16, "high": 24}), 512, 512)
    assert set(lengths(uniform)[0]) == set(range(16, 25))  # both ends included
    logn = make_requests(workload(prompt_len={"dist": "lognormal", "median": 50, "sigma": 0.8, "max": 300}), 512, 512)
    prompt_lens = lengths(logn)[0]
    assert 40 <= np.median(prompt_lens) <= 60 and prompt_lens.max() <= 300 and prompt_lens.min() >= 1
    assert np.mean(prompt_lens) > np.median(prompt_lens)  # the long tail
    assert all(0 <= t < 512 for r in logn for t in r.prompt)


def test_poisson_arrivals_have_the_configured_rate():
    requests = make_requests(workload(arrival={"mode": "poisson", "rate_per_s": 50.0}), 512, 512)
    arrivals = np.array([r.arrival_s for r in requests])
    assert arrivals[0] == 0.0 and (np.diff(arrivals) > 0).all()
    assert 1 / 50 * 0.8 < np.diff(arrivals).mean() < 1 / 50 * 1.2  # 200 draws: the mean gap within 20%


@pytest.mark.parametrize("arrival", [{"mode": "burst"}, {"mode": "poisson", "rate_per_s": 0.0}])
def test_burst_arrives_all_at_once(arrival):
    requests = make_requests(workload(arrival=arrival), 512, 512)
    assert {r.arrival_s for r in requests} == {0.0} and {r.after for r in requests} == {None}


def test_concurrency_is_a_closed_loop_of_users():
    requests = make_requests(workload(num_requests=7, arrival={"mode": "concurrency", "concurrency": 3}), 512, 512)
    assert [r.after for r in requests] == [None, None, None, 0, 1, 2, 3]


def test_the_seed_fixes_the_requests():
    spec = workload(prompt_len={"dist": "uniform", "low": 1, "high": 64}, arrival={"mode": "poisson", "rate_per_s": 9})
    assert make_requests(spec, 512, 512) == make_requests(spec, 512, 512)
    assert make_requests(spec, 512, 512) != make_requests({**spec, "seed": 1}, 512, 512)


def test_replay_reads_recorded_traffic(tmp_path):
    file = tmp_path / "traffic.jsonl"
    rows = [{"arrival_s": 0.0, "prompt_len": 12, "output_len": 3}, {"arrival_s": 0.25, "prompt_len": 40, "output_len": 9},
            {"arrival_s": 1.5, "prompt_len": 1, "output_len": 1}]
    file.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    cfg = compose(["workload=replay", f"workload.replay={file}"]).workload
    requests = make_requests(cfg, 512, 512)
    assert [(r.arrival_s, len(r.prompt), r.output_len) for r in requests] == [tuple(r.values()) for r in rows]
    first_two = make_requests(compose(["workload=replay", f"workload.replay={file}", "workload.num_requests=2"]).workload,
                              512, 512)
    assert len(first_two) == 2


@pytest.mark.parametrize("line, message", [
    ("not json", "line 2: not JSON"),
    ("[1, 2]", "line 2: a JSON list"),
    ('{"arrival_s": 0.1, "output_len": 3}', "line 2: 'prompt_len' is missing"),
    ('{"arrival_s": "soon", "prompt_len": 3, "output_len": 3}', "line 2: 'arrival_s' is 'soon'"),
    ('{"arrival_s": -1, "prompt_len": 3, "output_len": 3}', "line 2: arrival_s=-1"),
    ('{"arrival_s": 0, "prompt_len": 0, "output_len": 3}', "line 2: prompt_len=0"),
    ('{"arrival_s": 0, "prompt_len": 3, "output_len": 2.5}', "line 2: output_len=2.5"),
])
def test_a_bad_replay_line_is_named(tmp_path, line, message):
    file = tmp_path / "bad.jsonl"
    file.write_text('{"arrival_s": 0, "prompt_len": 3, "output_len": 3}\n' + line + "\n")
    with pytest.raises(UserError, match=message.replace("[", r"\[")):
        make_requests(workload(replay=str(file), num_requests=None), 512, 512)


def test_missing_or_empty_replay_and_unset_path(tmp_path):
    with pytest.raises(UserError, match="no file at"):
        make_requests(workload(replay=str(tmp_path / "nope.jsonl")), 512, 512)
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(UserError, match="workload has no requests"):
        make_requests(workload(replay=str(tmp_path / "empty.jsonl"), num_requests=None), 512, 512)
    with pytest.raises(UserError, match="workload.replay is not set"):
        make_requests(compose(["workload=replay"]).workload, 512, 512)


@pytest.mark.parametrize("fields, message", [
    (dict(num_requests=0), "workload has no requests: set workload.num_requests > 0"),
    (dict(num_requests=None), "workload has no requests: set workload.num_requests > 0"),
    (dict(prompt_len={"dist": "zipf", "a": 2}), "unknown workload.prompt_len dist 'zipf'"),
    (dict(output_len={"dist": "uniform", "low": 4}), "output_len: dist uniform needs low, high"),
    (dict(output_len={"dist": "uniform", "low": 9, "high": 4}), "low=9 is above high=4"),
    (dict(prompt_len={"dist": "fixed", "value": 0}), "below 1 token"),
    (dict(arrival={"mode": "ramp"}), "unknown workload.arrival mode 'ramp'"),
    (dict(arrival={"mode": "concurrency", "concurrency": 0}), "concurrency must be >= 1"),
    (dict(arrival={"mode": "poisson", "rate_per_s": -2.0}), "rate_per_s=-2.0 is negative"),
])
def test_bad_workloads_are_user_errors(fields, message):
    with pytest.raises(UserError, match=message):
        make_requests(workload(**fields), 512, 512)


def test_long_requests_are_scaled_to_fit_and_said_once(caplog):
    spec = workload(num_requests=4, prompt_len={"dist": "fixed", "value": 900}, output_len={"dist": "fixed", "value": 100})
    with caplog.at_level(logging.WARNING, logger="autotune.serve.workload"):
        requests = make_requests(spec, 512, 512)
    assert [(len(r.prompt), r.output_len) for r in requests] == [(460, 52)] * 4  # 9:1 kept
    assert len(caplog.records) == 1 and "4 of 4 requests were clipped" in caplog.text


@pytest.mark.parametrize("preset", ["mixed", "chat"])
def test_the_presets_make_valid_requests(preset):
    requests = make_requests(compose([f"workload={preset}"]).workload, 512, 512)
    assert len(requests) == compose([f"workload={preset}"]).workload.num_requests
    assert all(len(r.prompt) + r.output_len <= 512 for r in requests)
