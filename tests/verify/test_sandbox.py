"""The isolated runner, tested from the inside with the probe module: what a hostile child can and cannot do.

Steps that need root (namespaces, the uid drop) are asserted only where the child reports them applied;
the report itself is always checked.
"""

import os
import socket
import stat
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch

from autotune.sandbox import Limits
from autotune.sandbox.runner import _processes, child_env, run_isolated
from tests.verify.processes import alive_with

PROBE = "autotune.sandbox.probe"


def run_probe(tmp_path, payload, **kwargs):
    limits = Limits(timeout_s=kwargs.pop("timeout_s", 60), memory_mb=4096,
                    total_timeout_s=kwargs.pop("total_timeout_s", None), dir_mb=kwargs.pop("dir_mb", 256))
    return run_isolated(PROBE, payload, limits=limits, workdir=tmp_path / "work", **kwargs)


def applied(result, step: str) -> bool:
    return str(result.isolation.get(step, "")).startswith("applied")


def test_secrets_in_the_parent_environment_never_reach_the_child(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-for-children-1234")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_test_not_for_children")
    monkeypatch.setenv("AUTOTUNE_SOMETHING", "x")
    r = run_probe(tmp_path, {"echo": torch.arange(5), "read": [f"/proc/{os.getpid()}/environ"]})
    assert r.ok, r
    assert set(r.result["env"]) == set(child_env(tmp_path / "work", gpu=False))
    assert not {"OPENAI_API_KEY", "GITHUB_TOKEN", "AUTOTUNE_SOMETHING"} & set(r.result["env"])
    assert torch.equal(r.result["echo"], torch.arange(5))  # tensors travel both ways
    assert r.result["cwd"] == str((tmp_path / "work").resolve())
    if applied(r, "user"):
        assert r.result["read"][f"/proc/{os.getpid()}/environ"].startswith("blocked")
        assert r.result["parent_mem"].startswith("blocked")


def test_no_network_to_a_server_on_the_hosts_loopback(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.5)
    port = server.getsockname()[1]
    r = run_probe(tmp_path, {"connect": [["127.0.0.1", port]]})
    assert r.ok and "network" in r.isolation
    if not applied(r, "network"):
        pytest.skip(f"network isolation not available here: {r.isolation['network']}")
    assert r.result["connect"][f"127.0.0.1:{port}"].startswith("blocked")
    with pytest.raises(socket.timeout):
        server.accept()
    server.close()


def test_the_child_writes_only_its_private_directory_and_reads_no_root_secret(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("root only")
    secret.chmod(stat.S_IRUSR | stat.S_IWUSR)
    outside = [str(tmp_path / "outside.txt"), f"/tmp/autotune-probe-{uuid.uuid4().hex}", "/var/tmp/autotune-probe"]
    inside = str((tmp_path / "work").resolve() / "inside.txt")
    r = run_probe(tmp_path, {"write": [*outside, inside], "read": [str(secret)]})
    assert r.ok, r
    assert r.result["write"][inside] == "allowed"
    for path in outside:
        assert not os.path.exists(path), path
    if applied(r, "filesystem") or applied(r, "user"):
        assert all(r.result["write"][p].startswith("blocked") for p in outside)
        assert r.result["read"][str(secret)].startswith("blocked")


def test_stopping_early_kills_every_process_of_the_child_even_one_that_left_the_group(tmp_path):
    # the seccomp filter (in front of this layer) refuses processes: switched off to show the layer behind it
    r = run_probe(tmp_path, {"spawn_escaper": True, "sleep_s": 600},
                  on_event=lambda frame: frame.get("kind") == "spawned", seccomp=None)
    assert r.stopped and not r.ok and r.signal == "SIGKILL"
    assert [e["kind"] for e in r.events] == ["spawned"]
    if r.isolation.get("uid") is not None:
        assert not [pid for pid, uid in _processes() if uid == r.isolation["uid"]]


def test_a_hang_is_killed_at_the_time_limit(tmp_path):
    r = run_probe(tmp_path, {"sleep_s": 600}, timeout_s=8)
    assert r.timed_out and not r.ok and r.signal == "SIGKILL"
    assert 8 <= r.duration_s < 30


def test_a_run_that_reports_progress_gets_the_time_limit_per_step_and_a_total(tmp_path):
    def is_step(frame):
        return frame.get("kind") == "step"

    # 9 s of steps, one every 1.5 s: past a 6 s limit in all, never 6 s without a step (start-up, the first wait, is
    # the zygote's fork: about 1 s the first time on a busy 2-core machine, 0.05 s after)
    steps = {"steps": 6, "step_s": 1.5}
    r = run_probe(tmp_path / "a", steps, timeout_s=6, total_timeout_s=120, progress=is_step)
    assert r.ok and not r.timed_out and r.duration_s >= 9
    r = run_probe(tmp_path / "b", steps, timeout_s=6, total_timeout_s=3, progress=is_step)  # the total still holds
    assert r.timed_out and 3 <= r.duration_s < 6


def test_death_by_signal_and_exceptions_are_reported(tmp_path):
    r = run_probe(tmp_path, {"signal": "SIGABRT"})
    assert not r.ok and r.signal == "SIGABRT" and r.result is None
    r = run_probe(tmp_path, {"raise": "boom from the handler"})
    assert not r.ok and r.returncode == 1 and "boom from the handler" in r.error


def test_a_forged_pickle_frame_is_refused_without_being_unpickled(tmp_path):
    marker = tmp_path / "created-by-unpickling"
    r = run_probe(tmp_path, {"forge_marker": str(marker)})
    assert "malformed result frame" in r.channel_error
    assert not r.ok and r.result is None
    assert not marker.exists()


CHECKOUT = Path(__file__).resolve().parents[2]


def test_a_chain_of_processes_in_new_sessions_does_not_outlive_the_run(tmp_path):
    marker = f"autotune-chain-{uuid.uuid4().hex}"
    r = run_probe(tmp_path, {"fork_chain": marker, "sleep_s": 1.5}, seccomp=None)  # the layer behind seccomp
    assert r.ok, r
    if not applied(r, "processes"):
        pytest.skip(f"no PID namespace here: {r.isolation['processes']}")
    for _ in range(3):  # a survivor keeps the chain going: look more than once
        assert not alive_with(marker)
        time.sleep(0.3)


def test_no_system_v_shared_memory_outlives_the_run(tmp_path):
    key = 0x5A000000 + int(uuid.uuid4().hex[:6], 16)
    r = run_probe(tmp_path, {"shm_key": key})
    assert r.ok, r
    if not applied(r, "processes"):
        pytest.skip(f"no IPC namespace here: {r.isolation['processes']}")
    keys = [line.split()[0] for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]]
    assert str(key) not in keys


def test_the_child_sees_no_other_process_no_host_file_not_the_checkout_and_fills_only_its_capped_directory(tmp_path):
    planted = Path("/") / f"autotune-probe-{uuid.uuid4().hex}"  # a file directly under the host's /
    try:
        planted.write_text("host file")
    except OSError:
        planted = None
    try:
        r = run_probe(tmp_path, {"read": [str(CHECKOUT / "pyproject.toml"), "/etc/passwd", str(planted)],
                                 "list": [str(CHECKOUT), "/home", "/root", "/", "/etc", "/usr"], "fill_mb": 4},
                      dir_mb=16)
    finally:
        if planted is not None:
            planted.unlink()
    assert r.ok, r
    if not applied(r, "proc"):
        pytest.skip(f"no fresh /proc here: {r.isolation['proc']}")
    assert not any("pytest" in c for c in r.result["processes"]), r.result["processes"]
    assert len(r.result["processes"]) <= 3  # the namespace's init, the probe (and the process that started it)
    listed, read = r.result["listed"], r.result["read"]
    assert read[str(CHECKOUT / "pyproject.toml")].startswith("blocked")
    python = {Path(p).relative_to(top).parts[0] for top in ("/home", "/root", str(CHECKOUT))
              for p in (sys.prefix, sys.base_prefix) if p.startswith(top + "/")}  # Python may live in any of them
    assert set(listed[str(CHECKOUT)] or []) <= python | {"autotune"}, listed[str(CHECKOUT)]
    for top in ("/home", "/root"):
        assert set(listed[top] or []) <= python, listed[top]
    if not applied(r, "filesystem"):
        pytest.skip(f"no root of its own here: {r.isolation['filesystem']}")
    assert planted is None or (planted.name not in listed["/"] and read[str(planted)] == "blocked: No such file or "
                                                                                          "directory")
    assert listed["/etc"] == ["ld.so.cache"] and read["/etc/passwd"].startswith("blocked")
    assert set(listed["/usr"]) <= {"lib", "lib32", "lib64", "libx32"}, listed["/usr"]
    assert "16 MiB tmpfs" in r.isolation["filesystem"]  # the private directory: ENOSPC past its cap
    assert r.result["fill"] == {"written_mb": 16, "stopped": "ENOSPC"}
