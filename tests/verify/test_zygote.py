"""The fork server the runner starts children from: a child of it holds what a fresh interpreter would and no
more, a dead zygote loses no run silently, and a module that cannot be imported fails each run as it would have
in a fresh process."""

import os
import signal
import threading
import time

from autotune.sandbox import Limits, run_isolated
from autotune.sandbox.runner import child_env
from autotune.sandbox.zygote import _zygotes
from tests.verify.test_sandbox import PROBE, run_probe


def _zygote_pid() -> int:
    return _zygotes[(PROBE, False)].proc.pid


def test_children_share_no_descriptor_no_random_state_and_no_environment_with_the_zygote(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-for-the-zygote")
    first = run_probe(tmp_path / "a", {})
    second = run_probe(tmp_path / "b", {})
    assert first.ok and second.ok, (first, second)
    for r in (first, second):
        out_fd = int(r.result["argv"][-1].split(",")[1])
        assert r.result["argv"][0].endswith("autotune/sandbox/probe.py") and r.result["argv"][1] == "--sandbox-fds"
        # stdin, stdout, stderr, the result pipe, and the directory listdir opened: nothing of the zygote's
        assert len(set(r.result["fds"]) - {0, 1, 2, out_fd}) == 1, r.result["fds"]
    assert first.result["random"] != second.result["random"]  # each child reseeds Python's random
    with open(f"/proc/{_zygote_pid()}/environ", "rb") as f:
        zygote_env = dict(line.split(b"=", 1) for line in f.read().split(b"\0") if line)
    assert {k.decode() for k in zygote_env} == set(child_env(tmp_path, gpu=False))  # the children's allow-list
    assert set(first.result["env"]) == set(child_env(tmp_path, gpu=False))


def test_a_dead_zygote_ends_its_running_child_as_killed_and_the_next_run_starts_a_new_one(tmp_path):
    assert run_probe(tmp_path / "warm", {}).ok  # a zygote is running
    old = _zygote_pid()
    results = []
    sleeper = threading.Thread(target=lambda: results.append(run_probe(tmp_path / "sleep", {"sleep_s": 60})))
    sleeper.start()
    time.sleep(3)  # the child is asleep
    os.kill(old, signal.SIGKILL)
    sleeper.join(timeout=30)
    assert not sleeper.is_alive(), "the run did not end when its zygote died"
    (r,) = results
    assert not r.ok and r.signal == "SIGKILL", r
    again = run_probe(tmp_path / "again", {"echo": 7})
    assert again.ok and again.result["echo"] == 7, again
    assert _zygote_pid() != old


def test_a_module_that_does_not_import_fails_every_run_with_its_traceback(tmp_path):
    for name in ("first", "second"):
        r = run_isolated("autotune.sandbox.no_such_module", {}, limits=Limits(timeout_s=60, memory_mb=4096),
                         workdir=tmp_path / name)
        assert not r.ok and r.returncode == 1 and r.result is None, r
        assert "No module named autotune.sandbox.no_such_module" in r.stderr_tail  # as `python -m` says it


def test_each_child_draws_its_own_random_state_in_every_generator_it_inherits(tmp_path):
    """Python's, numpy's, torch's and the interpreter's program order (autotune.verify.interp.launch), which a
    fork would otherwise copy from the zygote: one run's draws would predict the next's."""
    draws = [run_probe(tmp_path / str(i), {"draws": True}) for i in range(2)]
    assert all(r.ok for r in draws), draws
    first, second = (r.result["draws"] for r in draws)
    assert set(first) == {"random", "numpy", "torch", "program order"}
    assert all(first[k] != second[k] for k in first), (first, second)


def test_a_status_above_128_that_names_no_ending_signal_is_an_exit_status(tmp_path):
    for code in (147, 163):  # SIGSTOP's number would stop the process; 35 has no name
        r = run_probe(tmp_path / str(code), {"exit": code})
        assert not r.ok and r.returncode == code and r.signal is None, r
