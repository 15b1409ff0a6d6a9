"""The engine settings (`conf/engine/`), read once into a frozen record, and what each engine's API looks like.

`engine=builtin` (the default) serves with autotune's own engine (autotune/serve/); `engine=vllm` and
`engine=sglang` drive a live server through its OpenAI API. `EngineSettings.of(cfg.engine)` checks the values
and says what to set when something is missing; `with_overrides({...})` gives setup B of a bench.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from autotune.config import as_dict
from autotune.errors import UserError

KINDS = ("builtin", "vllm", "sglang")


@dataclasses.dataclass(frozen=True)
class Api:
    """Where an engine's endpoints are, and how its profiler is switched on."""

    health: str
    version: str  # GET: a JSON object with a "version" key
    start_profile: str
    stop_profile: str
    default_port: int
    trace_globs: tuple[str, ...]  # the files its profiler writes


APIS = {
    "vllm": Api("/health", "/version", "/start_profile", "/stop_profile", 8000,
                ("*.pt.trace.json.gz", "*.pt.trace.json")),
    "sglang": Api("/health", "/get_server_info", "/start_profile", "/stop_profile", 30000,
                  ("*.trace.json.gz", "*.trace.json")),
}


@dataclasses.dataclass(frozen=True)
class EngineSettings:
    name: str  # builtin | vllm | sglang
    url: str | None = None  # the server's root (http://host:port, no /v1)
    launch: bool = False
    python: str | None = None
    model: str | None = None  # launch: the model folder; else the served model's name (null: the server's first)
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    threads: int | None = 1
    profile: bool = True  # call the profiler endpoints around the measured window
    profile_dir: str | None = None
    startup_timeout_s: float = 600.0
    request_timeout_s: float = 600.0
    stop_profile_timeout_s: float = 600.0
    api_key_env: str | None = None
    # launch: serve as users do, compiled (vLLM's default torch.compile; SGLang's CUDA graphs), not eager
    compiled: bool = False
    plugin: str | None = None  # launch: an exported plugin folder (`autotune export vllm --out DIR`) to serve with
    plugin_kernels: tuple[str, ...] = ()  # only these of the plugin's kernels (empty: all)
    vocab_size: int | None = None
    max_model_len: int | None = None
    log_dir: str | None = None

    def __post_init__(self):
        if self.name not in KINDS:
            raise UserError(f"unknown engine '{self.name}' (use engine=builtin, engine=vllm or engine=sglang)")
        if self.live and not self.launch and not self.url:
            raise UserError(f"engine={self.name} needs engine.url=http://HOST:PORT of a running server, or "
                            "engine.launch=true engine.model=PATH engine.python=PATH to start one")
        if self.launch:
            python, model = self.launched()
            # the server starts in a folder of its own; abspath, not resolve: a venv's python is a link
            object.__setattr__(self, "python", os.path.abspath(python))
            if Path(model).exists():
                object.__setattr__(self, "model", os.path.abspath(model))
        if self.plugin and not self.launch:
            raise UserError("engine.plugin needs engine.launch=true: a running server cannot be given a plugin "
                            "(install it where the server runs and restart it)")
        if self.plugin and not (Path(self.plugin) / "pyproject.toml").is_file():
            raise UserError(f"engine.plugin={self.plugin} is not a plugin folder (write one with `autotune export "
                            "vllm --out DIR`)")

    def launched(self) -> tuple[str, str]:
        """(engine.python, engine.model) of a server to launch; a UserError when either is missing."""
        if not (self.model and self.python):
            raise UserError(f"engine.launch=true needs engine.model=<model folder> and engine.python=<the Python "
                            f"{self.name} is installed in> (scripts/setup_vllm_cpu.sh makes both)")
        if not Path(self.python).is_file():
            raise UserError(f"engine.python={self.python}: no such file (the Python of {self.name}'s venv)")
        return self.python, self.model

    @property
    def live(self) -> bool:
        return self.name != "builtin"

    @property
    def api(self) -> Api:
        return APIS[self.name]

    @classmethod
    def of(cls, cfg: DictConfig | Mapping[str, Any] | None) -> EngineSettings:
        return cls.from_dict(as_dict(cfg))

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> EngineSettings:
        raw = {k: v for k, v in dict(raw).items() if v is not None}
        unknown = sorted(set(raw) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise UserError(f"unknown engine setting(s) {', '.join(unknown)} (see conf/engine/*.yaml)")
        raw.setdefault("name", "builtin")
        if "args" in raw:
            raw["args"] = tuple(str(a) for a in (raw["args"] if isinstance(raw["args"], (list, tuple))
                                                 else str(raw["args"]).split()))
        raw["env"] = tuple(sorted((str(k), str(v)) for k, v in dict(raw.get("env") or {}).items()))
        raw["plugin_kernels"] = tuple(str(k) for k in raw.get("plugin_kernels") or ())
        try:
            return cls(**raw)
        except TypeError as e:
            raise UserError(f"bad engine settings: {e}") from None

    def with_overrides(self, overrides: Mapping[str, Any] | None) -> EngineSettings:
        """These settings with some replaced (a bench's setup A or B); the env merges, the rest replaces."""
        if not overrides:
            return self
        merged = {**self.to_dict(), **dict(overrides)}
        merged["env"] = {**dict(self.env), **dict(overrides.get("env") or {})}
        return EngineSettings.from_dict(merged)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["env"] = dict(self.env)
        d["args"], d["plugin_kernels"] = list(self.args), list(self.plugin_kernels)
        return d

    def describe(self) -> str:
        what = (f"{self.name} at {self.url}" if not self.launch else
                f"{self.name} launched {'compiled' if self.compiled else 'eager'} from {self.python}")
        extra = f", plugin {self.plugin}" + (f" ({', '.join(self.plugin_kernels)})" if self.plugin_kernels else "")
        return what + (extra if self.plugin else "")


def profiler_config(profile_dir: str) -> str:
    """vLLM's --profiler-config for profiling with shapes, without Python stacks (which made a 1.5 GB trace that
    got the worker OOM-killed) or memory events."""
    return json.dumps({"profiler": "torch", "torch_profiler_dir": profile_dir, "torch_profiler_record_shapes": True,
                       "torch_profiler_with_stack": False, "torch_profiler_with_memory": False})
