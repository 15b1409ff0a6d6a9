"""Starting a server: the command line profiling needs, the wait for its health endpoint, the log's tail when it
dies, and the stop that takes its whole process group. The server is a real process: a stand-in `vllm` module
that serves tests/engine/openai_server.py and starts a child of its own, as vLLM's API server starts its engine."""

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import pytest

from autotune.engine.launch import serving, server_command
from autotune.engine.settings import EngineSettings
from autotune.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
STAND_IN = """
import json, subprocess, sys, threading
from tests.engine.openai_server import State, serve
args = sys.argv[1:]
if "--die" in args:
    print("model folder is not a model: boom", flush=True)
    sys.exit(3)
if "--die-in-worker" in args:  # as vLLM's engine core dies: its traceback, then the API server's own long goodbye
    print("INFO starting the engine core", flush=True)
    print("Traceback (most recent call last):", flush=True)
    print('  File "vllm/v1/engine/core.py", line 1, in run_engine_core', flush=True)
    print("AssertionError: All providers in priority must be registered implementations", flush=True)
    for i in range(130):
        print(f"INFO the API server winds down, line {i}", flush=True)
    sys.exit(1)
port = int(args[args.index("--port") + 1])
folder = json.loads(args[args.index("--profiler-config") + 1])["torch_profiler_dir"]
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # the engine core
open(folder + "/child.pid", "w").write(str(child.pid))
print("ready on", port, flush=True)
serve(State("vllm", folder), port)
threading.Event().wait()
"""


def _settings(tmp_path, *args, **kw):
    module = tmp_path / "standin" / "vllm" / "entrypoints" / "openai"
    module.mkdir(parents=True, exist_ok=True)
    for d in (tmp_path / "standin" / "vllm", tmp_path / "standin" / "vllm" / "entrypoints", module):
        (d / "__init__.py").write_text("")
    (module / "api_server.py").write_text(STAND_IN)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "standin"), str(ROOT)])}
    return EngineSettings.from_dict({"name": "vllm", "launch": True, "python": sys.executable, "model": "tiny",
                                     "args": list(args), "env": env, **kw})


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_a_launched_server_is_waited_for_and_stopped_with_its_whole_process_group(tmp_path):
    with serving(_settings(tmp_path), tmp_path / "work") as server:
        assert server.model == "tiny" and server.version == "0.32.0" and server.process.poll() is None
        child = int((server.profile_dir / "child.pid").read_text())
        assert _alive(child)
        assert "--enforce-eager" in server.flags and server.record()["launched"] is True
    assert server.process.poll() is not None
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child)  # the group went, not only the process we started
    assert "ready on" in server.log_path.read_text()


def test_a_server_that_dies_while_starting_is_an_error_with_its_log(tmp_path):
    with pytest.raises(UserError) as e:
        with serving(_settings(tmp_path, "--die"), tmp_path / "work"):
            pass
    assert "exited with code 3" in str(e.value) and "boom" in str(e.value)


def test_a_server_whose_worker_dies_says_the_first_error_and_keeps_its_log(tmp_path):
    """vLLM's engine core writes its traceback into the same log ~130 lines above the API server's last lines: the
    message leads with that first error, and the log stays where the message says."""
    with pytest.raises(UserError) as e:
        with serving(_settings(tmp_path, "--die-in-worker", log_dir=str(tmp_path / "logs")), tmp_path / "work"):
            pass
    said = str(e.value)
    assert "the first error:\nTraceback (most recent call last):" in said
    assert "AssertionError: All providers in priority must be registered implementations" in said
    assert "the API server winds down, line 129" in said  # and the log's end
    log = Path(said.split("from its log (")[1].split(", kept)")[0])
    assert log.is_file() and log.parent == tmp_path / "logs"


def test_the_command_line_asks_for_shapes_and_no_stacks_and_hides_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-secret-123")
    s = _settings(tmp_path, "--dtype", "float32", api_key_env="MY_KEY")
    command, masked = server_command(s, 8123, tmp_path)
    config = json.loads(command[command.index("--profiler-config") + 1])
    assert config["torch_profiler_record_shapes"] is True and config["torch_profiler_with_stack"] is False
    assert config["torch_profiler_with_memory"] is False and "--enforce-eager" in command
    assert command[-2:] == ["--dtype", "float32"] and "sk-secret-123" not in " ".join(command + masked)
    sglang = EngineSettings.from_dict({"name": "sglang", "launch": True, "python": sys.executable, "model": "m",
                                       "api_key_env": "MY_KEY"})
    command, masked = server_command(sglang, 30000, tmp_path)
    assert "--disable-cuda-graph" in command and command[-1] == "sk-secret-123" and masked[-1] == "***"


def test_a_compiled_launch_serves_as_users_do_with_inductor_recording_its_kernels(tmp_path):
    compiled = dataclasses.replace(_settings(tmp_path, "--dtype", "float32"), compiled=True)
    command, _ = server_command(compiled, 8123, tmp_path)
    assert "--enforce-eager" not in command
    options = json.loads(command[command.index("--compilation-config") + 1])
    assert options == {"inductor_compile_config": {"cpp.enable_kernel_profile": True}}
    # the user's own compilation config is theirs: not doubled
    own = dataclasses.replace(compiled, args=("--compilation-config", '{"mode": 0}'))
    assert server_command(own, 8123, tmp_path)[0].count("--compilation-config") == 1
    joined = dataclasses.replace(compiled, args=('--compilation-config={"mode": 0}',))
    assert not any("enable_kernel_profile" in a for a in server_command(joined, 8123, tmp_path)[0])
    sglang = EngineSettings.from_dict({"name": "sglang", "launch": True, "python": sys.executable, "model": "m",
                                       "compiled": True})
    assert "--disable-cuda-graph" not in server_command(sglang, 30000, tmp_path)[0]
    assert "launched compiled" in compiled.describe()
