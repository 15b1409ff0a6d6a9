"""A live engine to drive: one running already (`engine.url`), or one started here (`engine.launch=true`).

Launched, the server runs in a session of its own with the flags profiling needs (vLLM: `--enforce-eager` so
the small ops are not hidden in compiled regions, `--profiler-config` with shapes recorded and no Python stacks
or memory events; SGLang: `--disable-cuda-graph`, its profiler directory), its output in a log file. With
`engine.compiled=true` it serves as users run it instead: vLLM with its default compilation, Inductor told to
record each generated kernel (`cpp.enable_kernel_profile`, which profile/inductor.py maps to targets; a GPU's
Triton kernels are recorded anyway), SGLang with its CUDA graphs; `serving`
waits for its health endpoint (a timeout, or the process dying, is an error with the log's tail), and on the way
out stops the whole process group (SIGTERM, then SIGKILL after 20 s). With `engine.plugin=DIR` (an exported
plugin) the plugin is installed into a folder of its own on the server's PYTHONPATH, selected by
`VLLM_PLUGINS`, its kernels by `--ir-op-priority` and AUTOTUNE_KERNELS (engine.plugin_kernels), run by the
Triton interpreter on a CPU; the server's venv is left as it was.

    with serving(settings, workdir) as server:     # settings: EngineSettings
        server.url, server.version, server.model, server.flags
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from autotune.engine.settings import EngineSettings, profiler_config
from autotune.errors import UserError

IR_TARGETS = ("rms_norm", "fused_add_rms_norm")  # the plugin's kernels vLLM IR selects by --ir-op-priority
PLUGIN_PACKAGE = "autotune_vllm_kernels"
# the start of the first error in an engine's log: a Python traceback, or a line logged at ERROR/CRITICAL level
FIRST_ERROR = re.compile(r"^Traceback \(most recent call last\)|\b(ERROR|CRITICAL)\b|^\S*Error: ")
# the exported plugin's lines in a vLLM log (each process logs its own registration: the API server and the worker)
# and what vLLM refused of it: an attention backend its platform does not take ("Cannot use
# AttentionBackendEnum.CUSTOM backend on CPU.", vLLM's CPU platform, which runs only its own CPU_ATTN)
PLUGIN_LINE = re.compile(r"autotune kernels (not )?registered|autotune's .* provider|Cannot use \S+ backend")
REFUSED_BACKEND = re.compile(r"Cannot use (\S+) backend")


@dataclasses.dataclass
class Server:
    settings: EngineSettings
    url: str
    profile_dir: Path | None
    version: str | None = None
    model: str | None = None  # the name requests carry
    max_model_len: int | None = None
    vocab_size: int | None = None  # from the folder the server says it loaded (vLLM's /v1/models "root"), if here
    command: tuple[str, ...] = ()  # launched: the command line, secrets masked
    process: subprocess.Popen | None = None
    log_path: Path | None = None
    plugin_log: list[str] = dataclasses.field(default_factory=list)  # PLUGIN_LINE lines of a launched log, once up

    @property
    def flags(self) -> list[str] | None:
        """The server's flags as recorded with every figure: the launch command's; for a running server, what
        engine.args says it was started with (None when not given: its API does not tell)."""
        return list(self.command[3:]) if self.command else (list(self.settings.args) or None)

    def record(self) -> dict:
        """What the environment record says about the engine."""
        s = self.settings
        return {"name": s.name, "version": self.version, "url": self.url, "model": self.model, "launched": s.launch,
                "python": s.python, "flags": self.flags, "plugin": s.plugin,
                "plugin_kernels": list(s.plugin_kernels) or None, "max_model_len": self.max_model_len,
                "plugin_log": self.plugin_log or None}

    def read_plugin_log(self) -> list[str]:
        """The log's lines about the plugin (PLUGIN_LINE), each once, without their timestamps."""
        if not self.settings.plugin or not self.log_path or not self.log_path.is_file():
            return []
        lines = self.log_path.read_text(errors="replace").splitlines()
        found = (re.sub(r"\s+(INFO|WARNING)\s+\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?", r" \1", line).strip()
                 for line in lines if PLUGIN_LINE.search(line))
        return list(dict.fromkeys(re.sub(r"pid=\d+", "pid", line) for line in found))

    def log_excerpt(self, lines: int = 30) -> str:
        """Why it died, from its log: the first error (an engine's worker process writes its traceback to the same
        log, often a hundred lines above the API server's own last words) and the log's last lines."""
        if not self.log_path or not self.log_path.is_file():
            return "(no log)"
        text = self.log_path.read_text(errors="replace").splitlines()
        first = next((i for i, line in enumerate(text) if FIRST_ERROR.search(line)), None)
        if first is None or first >= len(text) - lines:
            return "\n".join(text[-lines:])
        cause = text[first:first + lines]
        return ("the first error:\n" + "\n".join(cause) + f"\n[... {len(text) - first - len(cause)} lines ...]\n"
                "the log's end:\n" + "\n".join(text[-10:]))


@contextlib.contextmanager
def serving(settings: EngineSettings, workdir: Path) -> Iterator[Server]:
    """The server to drive, ready; a launched one is stopped (its whole process group) on the way out."""
    if not settings.launch:
        assert settings.url is not None  # EngineSettings: a live engine not launched here has its url
        profile_dir = Path(settings.profile_dir) if settings.profile_dir else None
        server = Server(settings, settings.url.rstrip("/"), profile_dir)
        wait_ready(server, timeout_s=30.0)
        yield describe(server)
        return
    server = launch(settings, Path(workdir))
    try:
        wait_ready(server, settings.startup_timeout_s)
        yield describe(server)
    finally:
        stop(server)


def launch(settings: EngineSettings, workdir: Path) -> Server:
    workdir.mkdir(parents=True, exist_ok=True)
    port = settings.port or free_port(settings.host)
    profile_dir = Path(settings.profile_dir or workdir / "profiler").resolve()
    profile_dir.mkdir(parents=True, exist_ok=True)
    command, secret_free = server_command(settings, port, profile_dir)
    log_path = Path(settings.log_dir or workdir) / f"{settings.name}-server-{port}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=server_env(settings, profile_dir, workdir), cwd=workdir, start_new_session=True)
    return Server(settings, f"http://{settings.host}:{port}", profile_dir, command=tuple(secret_free),
                  process=process, log_path=log_path)


def server_command(settings: EngineSettings, port: int, profile_dir: Path) -> tuple[list[str], list[str]]:
    """(the command line, the same with the API key masked) that starts the server with profiling on."""
    s = settings
    python, model = s.launched()
    if s.name == "vllm":
        command = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--host", s.host,
                   "--port", str(port)]
        if not s.compiled:
            command += ["--enforce-eager"]
        elif not any(a.startswith(("--compilation-config", "-cc")) for a in s.args):  # the user's own is theirs
            command += ["--compilation-config", json.dumps({"inductor_compile_config": {"cpp.enable_kernel_profile":
                                                                                         True}})]
        if s.profile:
            command += ["--profiler-config", profiler_config(str(profile_dir))]
        priority = _ir_priority(s)
        if priority:
            command += ["--ir-op-priority", priority]
        if _attention_backend(s) and "--attention-backend" not in s.args:
            command += ["--attention-backend", "CUSTOM"]  # the name the plugin registers its backend under
    else:
        command = [python, "-m", "sglang.launch_server", "--model-path", model, "--host", s.host, "--port",
                   str(port), *([] if s.compiled else ["--disable-cuda-graph"])]
    if s.served_model_name:
        command += ["--served-model-name", s.served_model_name]
    command += list(s.args)
    masked = list(command)
    key = os.environ.get(s.api_key_env) if s.api_key_env else None
    if key and s.name == "sglang":  # vLLM takes it from VLLM_API_KEY (server_env), off the command line
        command += ["--api-key", key]
        masked += ["--api-key", "***"]
    return command, masked


def server_env(settings: EngineSettings, profile_dir: Path, workdir: Path) -> dict[str, str]:
    s = settings
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    if s.threads:
        environment["OMP_NUM_THREADS"] = str(s.threads)
    if s.name == "sglang":
        environment["SGLANG_TORCH_PROFILER_DIR"] = str(profile_dir)
        environment["SGLANG_PROFILE_WITH_STACK"] = "False"
    key = os.environ.get(s.api_key_env) if s.api_key_env else None
    if key and s.name == "vllm":
        environment["VLLM_API_KEY"] = key
    if s.plugin:
        environment.update(plugin_env(s, s.plugin, workdir))
    environment.update(dict(s.env))
    return environment


def plugin_env(settings: EngineSettings, plugin: str, workdir: Path) -> dict[str, str]:
    """The exported plugin (engine.plugin) installed into workdir/plugin-site (not the server's venv) and selected."""
    site = workdir / "plugin-site"
    if not (site / PLUGIN_PACKAGE).is_dir():
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
                               *_offline_build(), plugin], capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise UserError(f"engine.plugin={plugin} did not install: {done.stderr.strip()[-500:]}")
    environment = {"PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p),
                   "VLLM_PLUGINS": "autotune_kernels"}
    if settings.plugin_kernels:
        environment["AUTOTUNE_KERNELS"] = ",".join(settings.plugin_kernels)
    from autotune import env

    if env.resolve_device("auto") == "cpu":
        environment["TRITON_INTERPRET"] = "1"  # Triton kernels run only under the interpreter on a CPU
    return environment


def plugin_kernels(plugin: str) -> list[str]:
    """The kernels an exported plugin holds (its manifest)."""
    manifest = Path(plugin) / PLUGIN_PACKAGE / "manifest.json"
    try:
        return sorted(json.loads(manifest.read_text())["kernels"])
    except (OSError, KeyError, json.JSONDecodeError):
        raise UserError(f"engine.plugin={plugin}: no readable {manifest} (export the plugin again)") from None


def _ir_priority(settings: EngineSettings) -> str:
    if not settings.plugin:
        return ""
    chosen = [t for t in plugin_kernels(settings.plugin) if t in IR_TARGETS
              and (not settings.plugin_kernels or t in settings.plugin_kernels)]
    return json.dumps({t: ["autotune"] for t in chosen}) if chosen else ""


def _attention_backend(settings: EngineSettings) -> bool:
    """Whether the plugin serves attention: its paged_attention kernel, selected (engine.plugin_kernels)."""
    if not settings.plugin or "paged_attention" not in plugin_kernels(settings.plugin):
        return False
    return not settings.plugin_kernels or "paged_attention" in settings.plugin_kernels


def plugin_notes(record: dict) -> list[str]:
    """What a reader must know of the plugin in the engine it ran in (an engine record's `plugin_log`): a part vLLM
    refused, so that the engine's own served instead."""
    refused = [m.group(1) for line in record.get("plugin_log") or [] for m in [REFUSED_BACKEND.search(line)] if m]
    return [f"vLLM refused the plugin's attention backend ({name}): \"Cannot use {name} backend\" in its log, so its "
            "own attention served and the paged_attention kernel did not run (vLLM's CPU platform takes no backend "
            "but CPU_ATTN; on a GPU the Triton-based backend is selected)" for name in dict.fromkeys(refused)]


def _offline_build() -> list[str]:
    """Build the plugin with this environment's setuptools when it can (>= 70.1), else let pip fetch one."""
    try:
        import setuptools

        major, minor = (int(p) for p in setuptools.__version__.split(".")[:2])
    except (ImportError, ValueError):
        return []
    return ["--no-build-isolation", "--no-index"] if (major, minor) >= (70, 1) else []


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_ready(server: Server, timeout_s: float) -> None:
    """Until the health endpoint answers 200; UserError on the timeout or when the launched process dies."""
    deadline = time.monotonic() + timeout_s
    while True:
        if server.process is not None and server.process.poll() is not None:
            raise UserError(f"the {server.settings.name} server exited with code {server.process.returncode} before "
                            f"it was ready; from its log ({server.log_path}, kept):\n{server.log_excerpt()}")
        try:
            if http_get(server.url + server.settings.api.health, 5.0)[0] == 200:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            where = (f"; from its log ({server.log_path}, kept):\n{server.log_excerpt()}" if server.process
                     else " (is it running? is engine.url right?)")
            raise UserError(f"the {server.settings.name} server at {server.url} did not answer "
                            f"{server.settings.api.health} within {timeout_s:g} s{where}")
        time.sleep(1.0)


def describe(server: Server) -> Server:
    """The server's version, model name and context length, from its API."""
    headers = auth_headers(server.settings)
    try:
        _, info = http_get(server.url + server.settings.api.version, 10.0, headers)
        server.version = str(json.loads(info).get("version") or "") or None
    except (OSError, ValueError):
        server.version = None
    try:
        status, body = http_get(server.url + "/v1/models", 10.0, headers)
        models = json.loads(body).get("data") or [] if status == 200 else []
    except (OSError, ValueError):
        models = []
    wanted = server.settings.served_model_name or (server.settings.model if not server.settings.launch else None)
    chosen = next((m for m in models if m.get("id") == wanted), models[0] if models else None)
    if chosen is None:
        raise UserError(f"the {server.settings.name} server at {server.url} lists no model at /v1/models")
    server.model = chosen.get("id")
    server.max_model_len = chosen.get("max_model_len") or server.settings.max_model_len
    from autotune.engine.workload import model_vocab_size

    # vLLM names the folder it loaded ("root", else the id is the path): its config.json, where it is on this machine
    server.vocab_size = model_vocab_size(chosen.get("root")) or model_vocab_size(chosen.get("id"))
    server.plugin_log = server.read_plugin_log()
    return server


def auth_headers(settings: EngineSettings) -> dict[str, str]:
    key = os.environ.get(settings.api_key_env) if settings.api_key_env else None
    return {"Authorization": f"Bearer {key}"} if key else {}


def http_get(url: str, timeout_s: float, headers: dict | None = None) -> tuple[int, str]:
    return http("GET", url, None, timeout_s, headers)


def http(method: str, url: str, body: dict | None, timeout_s: float, headers: dict | None = None) -> tuple[int, str]:
    """(status, body text) of one request; an HTTP error status is returned, a connection failure raises OSError."""
    data = json.dumps(body).encode() if body is not None else None
    content_type = {"Content-Type": "application/json"} if data else {}
    request = urllib.request.Request(url, data=data, method=method, headers={**(headers or {}), **content_type})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def stop(server: Server, grace_s: float = 20.0) -> None:
    """SIGTERM to the server's whole process group (the API server, its engine core and workers), then SIGKILL."""
    process = server.process
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # the group's stragglers too, even once the leader has gone
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)
