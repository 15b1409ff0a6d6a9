"""The model-level check: a candidate inside the whole model, sandboxed, against the reference model."""

from __future__ import annotations

import os

import pytest
import torch

from autotune.agent import search
from autotune.config import compose
from autotune.errors import UserError
from autotune.run.model_check import check_model, compare

FAST = ["run.check_prompts=2", "run.check_new_tokens=4"]


def test_a_correct_kernel_passes_inside_a_model_loaded_from_a_checkpoint(tmp_path):
    from autotune.serve import build_model
    from autotune.serve.checkpoint import save_checkpoint

    ckpt = tmp_path / "ckpt"  # under /tmp, which the sandbox covers: it must re-expose the checkpoint
    save_checkpoint(build_model(compose([]).model, "cpu"), ckpt)
    cfg = compose([f"model.checkpoint={ckpt}", *FAST])
    if os.geteuid() == 0:  # the sandboxed model runs as another user: closed files are refused up front
        (ckpt / "model.safetensors").chmod(0o600)
        with pytest.raises(UserError, match="not readable by other users"):
            check_model(cfg, "silu_and_mul", "", workdir=tmp_path / "work")
        for f in ckpt.iterdir():
            f.chmod(0o644)
    (_, source), = search.candidates("silu_and_mul", 1)
    check = check_model(cfg, "silu_and_mul", source, workdir=tmp_path / "work")
    assert check.passed, check.reason
    assert check.tokens_identical and 0 <= check.max_logit_diff <= check.logit_tolerance
    # the kernel ran: every call the model made to silu_and_mul (one per layer and step) went to it
    assert check.kernel_calls == check.reference_calls >= 2 * 4
    assert f"the kernel served all {check.kernel_calls} calls to silu_and_mul" in check.reason


def test_a_target_the_model_never_calls_is_refused_not_passed(tmp_path):
    """int8_linear on the default model (model.quant=none): a kernel that raises on every call gave "same greedy
    tokens, max logit difference 0" before, because nothing called it."""
    source = "import triton\n\ndef int8_linear(x, weight, scale):\n    raise ValueError('never ran')\n"
    check = check_model(compose(FAST), "int8_linear", source, workdir=tmp_path / "work")
    assert not check.passed and check.reference_calls == 0 and check.kernel_calls == 0
    assert "never calls int8_linear" in check.reason and "model.quant=int8" in check.reason
    assert not (tmp_path / "work").exists()  # refused before the candidate ran


def test_the_models_attention_is_paged_attention_and_a_kernel_must_follow_its_block_table(tmp_path):
    """The built-in engine's attention is one paged_attention call per layer and step over vLLM's paged cache: the
    target's example kernel serves every call; one that walks each sequence's blocks in order from its first fails
    (the cache hands blocks out of a shuffled pool)."""
    from autotune.targets import get

    check = check_model(compose(FAST), "paged_attention", get("paged_attention").example_path.read_text(),
                        workdir=tmp_path / "good")
    assert check.passed, check.reason
    assert check.kernel_calls == check.reference_calls >= 2 * 4  # the tiny model's 2 layers, a call a step
    in_order = ("import torch\nfrom autotune.targets.paged_attention import paged_attention as reference\n\n"
                "def paged_attention(q, k, v, cu, lens, table, *rest):\n"
                "    steps = torch.arange(table.shape[1], dtype=table.dtype)\n"
                "    return reference(q, k, v, cu, lens, (table[:, :1] + steps) % k.shape[0], *rest)\n")
    check = check_model(compose(FAST), "paged_attention", in_order, workdir=tmp_path / "bad")
    assert not check.passed and check.kernel_calls == check.reference_calls
    assert "greedy tokens differ" in check.reason or "logit" in check.reason, check.reason


def test_a_kernel_that_raises_inside_the_model_fails_with_the_reason(tmp_path):
    source = "import triton\n\ndef rms_norm(x, weight, eps):\n    raise ValueError('no kernel here')\n"
    check = check_model(compose(FAST), "rms_norm", source, workdir=tmp_path / "work")
    assert not check.passed and "no kernel here" in check.reason


def _reference(n=2, new=3, vocab=5):
    tokens = torch.arange(n * new).reshape(n, new) % vocab
    logits = torch.linspace(-4, 4, n * new * vocab).reshape(n, new, vocab)
    return tokens, logits


def test_different_tokens_fail_and_name_the_first_difference():
    tokens, logits = _reference()
    got = tokens.clone()
    got[1, 2] += 1
    check = compare(tokens, logits, {"tokens": got, "logits": logits, "model_dtype": "float32"}, 2, 3, 0.0)
    assert not check.passed and "prompt 1, new token 2" in check.reason


def test_logits_beyond_the_tolerance_fail_even_with_the_same_tokens():
    tokens, logits = _reference()
    bound = 1e-4 + 1e-4 * 4.0  # LOGIT_TOLERANCE[float32] at max|logit| = 4
    near = {"tokens": tokens, "logits": logits + 0.5 * bound, "model_dtype": "float32"}
    far = {"tokens": tokens, "logits": logits + 2 * bound, "model_dtype": "float32"}
    assert compare(tokens, logits, near, 2, 3, 0.0).passed
    check = compare(tokens, logits, far, 2, 3, 0.0)
    assert not check.passed and "above the tolerance" in check.reason
