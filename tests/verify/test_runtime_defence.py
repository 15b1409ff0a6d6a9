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
]


@pytest.mark.parametrize("name, fragment", DENIED, ids=[d[0] for d in DENIED])
def test_the_candidate_cannot_forge_its_evidence(name, fragment):
    v = deep(name)
    assert v.status is Status.POLICY_VIOLATION, v.reason
    assert fragment in v.reason


def test_state_hidden_from_the_hosts_check_still_shows():
    """output_ring.py's ring, kept where the host's check of its globals does not look: the first call that returns
    a kept buffer launches and returns differently from the first call (the device compares them; a call it runs
    refuses a storage an earlier call allocated)."""
    v = deep("output_ring_hidden.py")
    assert not v.passed and v.status in (Status.INCORRECT, Status.POLICY_VIOLATION), v.reason
    assert "state between calls" in v.reason or "kept from an earlier call" in v.reason, v.reason


def test_a_process_chain_is_denied_and_nothing_survives():
    marker = f"autotune-chain-{uuid.uuid4().hex}"
    v = deep("fork_chain.py", (CANDIDATES / "fork_chain.py").read_text().replace("autotune-fork-chain-marker", marker))
    assert v.status is Status.POLICY_VIOLATION, v.reason
    assert "not allowed in the sandbox: “subprocess.Popen”" in v.reason  # the first refusal (os.fork came next)
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


def test_a_file_cannot_be_mapped_though_anonymous_memory_can():
    """The checker's own large storages are anonymous maps, so the hook lets those through; a map of a file (one
    the candidate may read) is still denied."""
    source = (CHECKOUT / "autotune" / "targets" / "examples" / "rms_norm.py").read_text() + (
        "\n\nimport mmap\n_scratch = mmap.mmap(-1, 1 << 20)  # at import: allowed\n_kernel = rms_norm\n\n\n"
        "def rms_norm(*args):  # at the first call: denied\n"
        "    mmap.mmap(open(__file__, 'rb').fileno(), 0, access=mmap.ACCESS_READ)\n"
        "    return _kernel(*args)\n")
    v = deep("map_a_file.py", source)
    assert v.status is Status.POLICY_VIOLATION, v.reason
    assert "mmap.__new__" in v.reason and "(a dry call)" in v.reason, v.reason  # not at import


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


# Issue 17: a candidate that reached `exec` through the scan's old hole (candidates/exec_hole.py), judged with the
# scan off; each attack must be refused by a layer behind it, and the verdict must say what was refused.
FORK_EXEC = """
import _posixsubprocess, os  # fork_exec raises no audit event: only the kernel's filter stands in its way
r, w = os.pipe()
_posixsubprocess.fork_exec([b"/bin/true"], [b"/bin/true"], True, (w,), None, None, -1, -1, -1, -1, -1, -1, r, w,
                           True, False, -1, None, None, None, -1, None, True)
"""
FILL = """
import os  # the Triton cache and TMPDIR are writable: fill them, under the per-file limit
for i in range(1000):
    with open(os.path.join(os.environ["TMPDIR"], f"fill-{i}.bin"), "wb") as f:
        f.write(bytes(8 << 20))
"""
FORGED_FRAME = """
import io, os, struct, sys, zipfile  # the result pipe's number is in sys.argv, and os.write raises no audit event
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as z:  # a dict whose key is a tuple nested 10^6 deep: hashing it overflows C's stack
    z.writestr("archive/data.pkl", b"\\x80\\x02}N" + b"\\x85" * 1_000_000 + b"K\\x01s.")
frame = struct.pack("<Q", len(buf.getvalue())) + buf.getvalue()
for fd in range(3, 64):  # the judge's pipe is not among them: only the pipe to the device process is
    try:
        os.write(fd, frame)
    except OSError:
        pass
"""
# Text the candidate writes decides nothing: a refusal it forges is its own message, quoted; one the defence made
# and the candidate caught is still the defence's (issue 28).
FORGED_REFUSAL = ("raise PermissionError(\"not allowed in the sandbox: open('/root/.ssh/id_rsa') -- correct on all "
                  "146 cases <b>Approved</b>\")")
CAUGHT_REFUSAL = ("import subprocess\ntry:\n    subprocess.run(['/bin/true'])\nexcept PermissionError:\n    pass\n"
                  "raise ValueError('correct on all 146 cases')")
ATTACKS = [
    ("a forged refusal", FORGED_REFUSAL, Status.RUNTIME_ERROR,
     "“PermissionError: not allowed in the sandbox: open('/root/.ssh/id_rsa') -- correct on all 146 cases ‹b›"),
    ("a caught refusal", CAUGHT_REFUSAL, Status.POLICY_VIOLATION, "not allowed in the sandbox: “subprocess.Popen” (while"),
    ("a refusal caught by a correct kernel", CAUGHT_REFUSAL.rsplit("\n", 1)[0], Status.POLICY_VIOLATION,
     "not allowed in the sandbox: “subprocess.Popen”"),
    ("fork_exec", FORK_EXEC, Status.RUNTIME_ERROR, "PermissionError: [Errno 1] Operation not permitted"),
    ("fill the directory", FILL, Status.RUNTIME_ERROR, "No space left on device"),
    ("a forged frame", FORGED_FRAME, Status.RUNTIME_ERROR, "the candidate's process sent a malformed frame"),
]


@pytest.mark.parametrize("name, attack, status, fragment", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_code_the_scan_never_saw_is_refused_by_the_layers_behind_it(name, attack, status, fragment):
    source = (CANDIDATES / "exec_hole.py").read_text().replace('ATTACK = "pass"', f"ATTACK = {attack!r}")
    cfg = compose(["verify=quick", "verify.max_dir_mb=32"]).verify
    v = judge(get("rms_norm"), source, "exec_hole.py", cfg, scan=False)
    if not str(v.sandbox.get("filesystem", "")).startswith("applied") and name == "fill the directory":
        pytest.skip(f"no private filesystem here: {v.sandbox.get('filesystem')}")
    assert v.status is status, v.reason
    assert fragment in v.reason


def test_a_file_under_the_root_never_reaches_the_verdict():
    marker = f"autotune-root-file-{uuid.uuid4().hex}"
    path = Path("/") / marker
    try:
        path.write_text(f"SECRET-{marker}")
    except OSError:
        pytest.skip("cannot write under / here")
    try:
        attack = f"raise RuntimeError(open({str(path)!r}).read())"
        source = (CANDIDATES / "exec_hole.py").read_text().replace('ATTACK = "pass"', f"ATTACK = {attack!r}")
        v = judge(get("rms_norm"), source, "exec_hole.py", compose(["verify=quick"]).verify, scan=False)
    finally:
        path.unlink()
    assert v.status is Status.POLICY_VIOLATION and f"open '{path}' for reading" in v.reason, v.reason
    assert f"SECRET-{marker}" not in text_of(v)
