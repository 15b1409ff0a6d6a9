"""Fixtures for the engine tests: a local OpenAI-compatible server (openai_server.py), and the live vLLM one."""

import os
from pathlib import Path

import pytest

from tests.engine.openai_server import State, serve
from tests.publish.conftest import project  # noqa: F401 - a user's checkout, for the run that publishes into it

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake(tmp_path):
    """Start a vLLM-like server (with a profiler folder) on a free port: yields (state, url)."""
    servers = []

    def start(**kwargs) -> tuple[State, str]:
        kwargs.setdefault("profile_dir", str(tmp_path / f"prof{len(servers)}"))
        state = State(**kwargs)
        server = serve(state)
        servers.append(server)
        return state, f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def vllm_dir() -> Path:
    """Where scripts/setup_vllm_cpu.sh put vLLM's venv and the tiny model ($AUTOTUNE_VLLM_DIR, else .vllm-cpu/)."""
    return Path(os.environ.get("AUTOTUNE_VLLM_DIR") or ROOT / ".vllm-cpu")
