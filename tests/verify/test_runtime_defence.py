"""The run-time defence and the sandbox's clean-up, shown with the static scan OFF: what a hostile candidate
gets when only the worker's audit hook, its frozen/sealed modules, its own namespaces and the verdict's
masking stand between it and the checker. Each candidate is one file in candidates/.
"""

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from autotune.config import compose
from autotune.targets import get
from autotune.verify.judge import judge
from autotune.verify.verdict import Status, mask_secrets
from tests.verify.processes import alive_with

CANDIDATES = Path(__file__).parent / "candidates"
CHECKOUT = Path(__file__).resolve().parents[2]
CFG = compose([]).verify


def deep(name: str, source: str | None = None):
    """Judge a candidate with the static scan off."""
    return judge(get("rms_norm"), source or (CANDIDATES / name).read_text(), name, CFG, scan=False)


def text_of(verdict) -> str:
    return json.dumps(verdict.to_dict())


DENIED = [
    ("forge_worker.py", "reading __main__.run_case"),  # the attack that once forged every case's evidence
    ("import_math.py", "torch math while the candidate was imported"),
    ("unhook_counter.py", "torch math at run time"),  # its unhooking finds nothing to undo; the op record remains
    ("output_ring_hidden.py", "a tensor kept from an earlier call"),  # the device, behind the host's globals check
]


@pytest.mark.parametrize("name, fragment", DENIED, ids=[d[0] for d in DENIED])
def test_the_candidate_cannot_forge_its_evidence(name, fragment):
    v = deep(name)
    assert v.status is Status.POLICY_VIOLATION, v.reason
    assert fragment in v.reason


def test_a_process_chain_is_denied_and_nothing_survives():
    marker = f"autotune-chain-{uuid.uuid4().hex}"
    v = deep("fork_chain.py", (CANDIDATES / "fork_chain.py").read_text().replace("autotune-fork-chain-marker", marker))
    assert v.status is Status.POLICY_VIOLATION, v.reason
    assert "not allowed in the sandbox: os.fork" in v.reason  # subprocess.Popen was denied first, then fork
    for _ in range(3):
        assert not alive_with(marker)
        time.sleep(0.3)


def test_shared_memory_through_ctypes_is_denied_and_none_is_left():
    key = 0x5B000000 + int(uuid.uuid4().hex[:6], 16)
    v = deep("shm_leak.py", (CANDIDATES / "shm_leak.py").read_text().replace("0x5A5A0001", hex(key)))
    assert v.status is Status.POLICY_VIOLATION, v.reason
    assert "ctypes" in v.reason
    keys = [line.split()[0] for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]]
    assert str(key) not in keys


def test_another_processs_api_key_never_reaches_the_verdict():
    secret = f"sk-test-{uuid.uuid4().hex}"
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "--api-key", secret])
    try:
        v = deep("leak_cmdline.py")
    finally:
        server.kill()
        server.wait()
    assert not v.passed and v.status in (Status.POLICY_VIOLATION, Status.RUNTIME_ERROR), v.reason
    assert secret not in text_of(v) and secret[8:] not in text_of(v)


def test_the_checkout_and_home_directories_are_not_listed():
    source = (CANDIDATES / "list_private.py").read_text().replace("/nonexistent/autotune-private-folder", str(CHECKOUT))
    v = deep("list_private.py", source)
    assert v.status is Status.POLICY_VIOLATION, v.reason
    assert "pyproject.toml" not in text_of(v) and ".pyenv" not in text_of(v)


def test_what_looks_like_a_secret_is_masked_in_a_failing_verdict():
    source = (CANDIDATES / "no_launch.py").read_text() + (
        "\nimport sys\nprint('--api-key=sk-abcdefghijklmnop OPENAI_API_KEY=hunter2', file=sys.stderr)\n"
        "raise RuntimeError('token ghp_abcdefghijklmnopqrstuvwxyz0123 --token hunter3')\n")
    v = deep("no_launch.py", source)
    assert not v.passed
    for secret in ("sk-abcdefghijklmnop", "hunter2", "ghp_abcdefghijklmnopqrstuvwxyz0123", "hunter3"):
        assert secret not in text_of(v)
    assert "[masked]" in v.reason


def test_a_passing_verdict_carries_no_stderr():
    v = judge(get("rms_norm"), (CANDIDATES / "rms_norm_rowwise.py").read_text(), "rms_norm_rowwise.py",
              compose(["verify=quick"]).verify)
    assert v.passed, v.reason
    assert v.stderr_tail == ""


@pytest.mark.parametrize("text, kept", [
    ("vllm\0serve\0--api-key\0sk-proj-abc123def456\0--port\08000", "--port"),
    ("GITHUB_TOKEN=github_pat_11ABCDEFG0123456789_abcdef", "GITHUB_TOKEN="),
    ("--token s3cr3t-value --max-tokens 16", "--max-tokens 16"),
    ('{"api_key": "plain-value"}', '"api_key"'),
    ("Authorization: Bearer abcdefghijklmnop", "Authorization"),
])
def test_mask_secrets(text, kept):
    masked = mask_secrets(text)
    assert "[masked]" in masked and kept in masked
    for secret in ("sk-proj-abc123def456", "github_pat_11ABCDEFG0123456789_abcdef", "s3cr3t-value", "plain-value",
                   "abcdefghijklmnop"):
        assert secret not in masked
