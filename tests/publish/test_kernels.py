"""The kernels registry: which merged kernel is best, what enable() routes, and loading on a CPU-only machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autotune import kernels, publish
from autotune.config import compose
from autotune.errors import UserError
from autotune.serve import dispatch

KERNEL = Path(__file__).resolve().parents[1] / "verify" / "candidates" / "rms_norm_chunked.py"  # a correct RMSNorm


def write_kernel(root: Path, target: str, kid: str, status: str, speedup: float | None = None, source: str = "") -> None:
    folder = root / target / kid
    folder.mkdir(parents=True)
    (folder / "kernel.py").write_text(source or f"def {target}(*args):\n    return None\n")
    verdict = {"status": status, "measured": speedup is not None, "speedup_geomean": speedup}
    (folder / "provenance.json").write_text(json.dumps({"verdict": verdict, "created_at": "2026-11-30T10:00:00+00:00"}))


def test_best_is_the_accepted_kernel_with_the_highest_weighted_speedup(tmp_path):
    root = tmp_path / "kernels"
    write_kernel(root, "rms_norm", "aaaaaa", "accepted", 1.2)
    write_kernel(root, "rms_norm", "bbbbbb", "accepted", 1.5)
    write_kernel(root, "rms_norm", "cccccc", "unmeasured")
    write_kernel(root, "rms_norm", "dddddd", "incorrect")
    write_kernel(root, "not_a_target", "eeeeee", "accepted", 9.0)
    found = kernels.merged(root)
    assert list(found) == ["rms_norm"]
    assert [k.id for k in found["rms_norm"]][:3] == ["bbbbbb", "aaaaaa", "cccccc"]
    assert kernels.best(root, "rms_norm").id == "bbbbbb"
    assert kernels.best(root, "softmax") is None


def test_without_timings_the_most_recently_merged_kernel_wins(project, make_request, cfg_of):
    cfg = cfg_of(project)
    source = make_request().source
    older = publish.publish(make_request(source), cfg)
    newer = publish.publish(make_request(source + "\n# the same kernel, proposed by a later run\n"), cfg)
    publish.approve(cfg, newer.id)
    publish.approve(cfg, older.id)  # merged last, so it is the one to serve
    ranks = {k.id: k.merge_rank for k in kernels.merged(project / "kernels")["rms_norm"]}
    assert ranks == {older.id.removeprefix("rms_norm-"): 0, newer.id.removeprefix("rms_norm-"): 1}
    assert kernels.best(project / "kernels", "rms_norm").id == older.id.removeprefix("rms_norm-")


def test_enable_follows_the_config(tmp_path):
    root = tmp_path / "kernels"
    write_kernel(root, "rms_norm", "aaaaaa", "unmeasured")
    assert kernels.enable(compose([f"kernels.dir={root}"])) == {}  # kernels.enable is false by default
    assert dispatch.overridden() == {}
    with pytest.raises(UserError, match=r"kernels.only names silu_and_mul, but .* has no merged silu_and_mul kernel"):
        kernels.enable(compose(["kernels.enable=true", f"kernels.dir={root}", "kernels.only=[silu_and_mul]"]))
    with pytest.raises(UserError, match=r"unknown target 'rmsnorm'"):
        kernels.enable(compose(["kernels.enable=true", f"kernels.dir={root}", "kernels.only=[rmsnorm]"]))
    with pytest.raises(UserError, match=r"kernels.dir .*nowhere does not exist .*autotune review approve"):
        kernels.enable(compose(["kernels.enable=true", f"kernels.dir={tmp_path / 'nowhere'}"]))
    assert dispatch.overridden() == {}


def test_load_errors(tmp_path, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # load() turns it on for the process: restore it after
    root = tmp_path / "kernels"
    write_kernel(root, "softmax", "aaaaaa", "unmeasured", source="def soft_max(x):\n    return x\n")
    write_kernel(root, "rms_norm", "bbbbbb", "unmeasured", source="def rms_norm(x, weight, eps:\n")
    with pytest.raises(UserError, match=r"defines no function softmax\(\)"):
        kernels.load(kernels.best(root, "softmax"))
    with pytest.raises(UserError, match=r"failed to import: SyntaxError"):
        kernels.load(kernels.best(root, "rms_norm"))


def test_a_kernel_cannot_run_where_triton_was_imported_before_the_interpreter(tmp_path):
    """Documents how triton 3.9 reads TRITON_INTERPRET: once, when triton.language is imported."""
    root = tmp_path / "kernels"
    write_kernel(root, "rms_norm", "aaaaaa", "unmeasured", source=KERNEL.read_text())
    script = f"""
import torch, triton
from autotune import kernels
assert not torch.cuda.is_available()
try:
    kernels.load(kernels.best({str(root)!r}, "rms_norm"))
except RuntimeError as e:
    print(e)
"""
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert "triton was imported before the Triton interpreter was turned on" in out.stdout, out.stderr[-2000:]
