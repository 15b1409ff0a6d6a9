"""The regression test a proposal carries: after approval it runs in the project's suite and re-verifies the kernel."""

from __future__ import annotations

import subprocess
import sys

from autotune import publish

# No Triton kernel at all: the checker's static scan rejects it, so its generated test must fail.
TORCH_ONLY = '''import torch


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
'''


def test_generated_tests_pass_for_a_correct_kernel_and_fail_for_a_broken_one(project, git, make_request, cfg_of):
    cfg = cfg_of(project)
    good = publish.approve(cfg, publish.publish(make_request(), cfg).id)
    bad = publish.approve(cfg, publish.publish(make_request(TORCH_ONLY), cfg).id)
    tests = sorted(git(project, "ls-files", "tests/kernels").split())
    assert tests == sorted(f"tests/kernels/test_rms_norm_{p.id.removeprefix('rms_norm-')}.py" for p in (good, bad))
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "tests/kernels"],
                         cwd=project, capture_output=True, text=True, timeout=240)
    good_test = f"test_rms_norm_{good.id.removeprefix('rms_norm-')}_still_passes"
    bad_test = f"test_rms_norm_{bad.id.removeprefix('rms_norm-')}_still_passes"
    assert f"PASSED tests/kernels/test_rms_norm_{good.id.removeprefix('rms_norm-')}.py::{good_test}" in out.stdout, out.stdout[-3000:]
    assert f"FAILED tests/kernels/test_rms_norm_{bad.id.removeprefix('rms_norm-')}.py::{bad_test}" in out.stdout
    assert "policy_violation" in out.stdout and "1 failed, 1 passed" in out.stdout
