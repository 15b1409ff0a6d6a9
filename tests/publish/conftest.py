"""Fixtures for the publishing tests: real git repositories in tmp_path, a real correct Triton kernel, proposal
requests, and a real HTTP server on 127.0.0.1 that implements GitHub's pulls endpoints.

Git runs without any machine identity (no global or system config), as on a CI runner: every commit the code
under test makes must carry `publish.author`.
"""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from autotune.config import compose
from autotune.env import collect
from autotune.publish import ProposalRequest
from autotune.verify.verdict import CaseResult, Status, Verdict

KERNEL = Path(__file__).resolve().parents[1] / "verify" / "candidates" / "rms_norm_chunked.py"  # a correct RMSNorm
TOKEN = "ghp_test_0123456789abcdefTOKEN"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(autouse=True)
def no_git_identity(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "no-global-gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def project(tmp_path) -> Path:
    """A user's checkout on branch main with one commit (made with a one-off identity)."""
    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("a project\n")
    git(repo, "add", "README.md")
    git(repo, "-c", "user.name=User", "-c", "user.email=user@example.com", "commit", "-q", "-m", "init")
    return repo


def config(repo: Path, *overrides: str):
    return compose([f"publish.repo={repo}", *overrides])


def verdict(status: Status = Status.UNMEASURED, reason: str = "correct on 8 cases; no GPU to time it") -> Verdict:
    """A checker record as autotune.verify writes it: profile shapes and edge shapes, seeds, kinds."""
    cases = []
    for shape, source in (([7, 1000], "profile"), ([1, 128], "edge")):
        for dtype, rtol in (("float32", 1.3e-6), ("bfloat16", 1.6e-2)):
            for kind in ("normal", "special"):
                cases.append(CaseResult(shape, dtype, kind, 0, True, 2.4e-7, 3.1e-7, rtol, 1e-5, source=source))
    return Verdict(status, reason, "rms_norm", "candidates/rms_norm/c0_t1.py", cases=cases,
                   sandbox={"network": "unshared", "uid": 65534}, duration_s=11.5)


def request(source: str | None = None, *, run_id: str = "2026-11-30/10-00-00", v: Verdict | None = None) -> ProposalRequest:
    hotspot = {"target": "rms_norm", "share": 0.12, "calls": 40, "total_us": 1234.5, "projected_gain": 0.06,
               "serving_time_us": 10287.5, "shapes": [{"shape": [7, 1000], "dtype": "float32", "calls": 40, "total_us": 1234.5}]}
    candidate = {"id": "c0_t1", "agent": "openai", "model": "qwen-coder", "turn": 2, "prompt_tokens": 5120,
                 "cached_tokens": 4096, "completion_tokens": 900, "cost_usd": 0.0123,
                 "spent": {"requests": 3, "tokens": 16540, "cost_usd": 0.0687}}  # the target's search, failures too
    model_check = {"prompts": 4, "new_tokens": 8, "tokens_identical": True, "max_logit_diff": 3.0e-6, "latency": None}
    return ProposalRequest(target="rms_norm", source=source or KERNEL.read_text(), verdict=v or verdict(),
                           candidate=candidate, hotspot=hotspot, model_check=model_check,
                           environment=collect({"pool": "ci"}).to_dict(), run_dir="/tmp/runs/x", run_id=run_id)


@pytest.fixture
def bare_remote(tmp_path, project) -> Path:
    """A bare repository as the project's `origin`."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(project, "remote", "add", "origin", str(remote))
    git(project, "push", "-q", "origin", "main")
    return remote


class FakeGitHub(ThreadingHTTPServer):
    """GitHub's pulls endpoints for one repository, checking the Bearer token and that the head branch exists."""

    def __init__(self, owner: str, name: str, remote: Path):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.owner, self.name, self.remote = owner, name, remote
        self.pulls: list[dict] = []
        self.calls: list[tuple[str, str, str | None]] = []  # (method, path, Authorization header)
        self.fail_create: tuple[int, dict] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def branch_exists(self, branch: str) -> bool:
        return subprocess.run(["git", "--git-dir", str(self.remote), "rev-parse", "--verify", "-q", f"refs/heads/{branch}"],
                              capture_output=True).returncode == 0


class _Handler(BaseHTTPRequestHandler):
    server: FakeGitHub

    def log_message(self, *args):  # keep test output quiet
        pass

    def _send(self, code: int, payload) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        auth = self.headers.get("Authorization")
        self.server.calls.append((method, url.path, auth))
        if auth != f"Bearer {TOKEN}":
            return self._send(401, {"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"})
        prefix = f"/repos/{self.server.owner}/{self.server.name}/pulls"
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if url.path == prefix and method == "GET":
            return self._list(urllib.parse.parse_qs(url.query))
        if url.path == prefix and method == "POST":
            return self._create(body)
        if url.path.startswith(prefix + "/") and method == "PATCH":
            return self._update(int(url.path.rsplit("/", 1)[1]), body)
        return self._send(404, {"message": "Not Found"})

    def _list(self, query) -> None:
        head, state = query.get("head", [""])[0], query.get("state", ["open"])[0]
        self._send(200, [p for p in self.server.pulls if (not head or p["head"]["label"] == head) and p["state"] == state])

    def _create(self, body: dict) -> None:
        s = self.server
        if s.fail_create:
            return self._send(*s.fail_create)
        if not s.branch_exists(body.get("head", "")):
            return self._send(422, {"message": "Validation Failed", "errors": [{"resource": "PullRequest", "field": "head", "code": "invalid"}]})
        label = f"{s.owner}:{body['head']}"
        if any(p["head"]["label"] == label and p["state"] == "open" for p in s.pulls):
            return self._send(422, {"message": "Validation Failed", "errors": [{"message": f"A pull request already exists for {label}."}]})
        number = len(s.pulls) + 1
        pull = {"number": number, "html_url": f"https://github.test/{s.owner}/{s.name}/pull/{number}", "state": "open",
                "title": body["title"], "body": body.get("body", ""), "draft": body.get("draft", False),
                "head": {"ref": body["head"], "label": label}, "base": {"ref": body["base"]}}
        s.pulls.append(pull)
        self._send(201, pull)

    def _update(self, number: int, body: dict) -> None:
        pull = next((p for p in self.server.pulls if p["number"] == number), None)
        if pull is None:
            return self._send(404, {"message": "Not Found"})
        pull.update({k: v for k, v in body.items() if k in ("title", "body", "state")})
        self._send(200, pull)

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")

    def do_PATCH(self):
        self._route("PATCH")


@pytest.fixture
def github(bare_remote):
    server = FakeGitHub("acme", "widgets", bare_remote)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


# Test modules use these helpers through fixtures (pytest's importlib mode does not put tests/ on sys.path).
@pytest.fixture(name="git")
def git_fixture():
    return git


@pytest.fixture
def make_request():
    return request


@pytest.fixture
def make_verdict():
    return verdict


@pytest.fixture
def cfg_of():
    return config


@pytest.fixture
def token(monkeypatch) -> str:
    monkeypatch.setenv("AUTOTUNE_TEST_GH_TOKEN", TOKEN)
    return TOKEN
