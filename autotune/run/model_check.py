"""The model-level check: the whole served model with a candidate plugged in, before anything is proposed.

An op-level pass is necessary, not sufficient: a kernel that is within tolerance per call can still shift
what the model generates. So the candidate (still untrusted: nobody has reviewed it) runs inside the
sandbox, plugged into its target's dispatch point of the configured model, on a fixed set of seeded prompts;
this process computes the same generation with the reference ops and compares: the greedy tokens must be
identical and the logits within the tolerance below. On a GPU the child also serves the workload twice,
reference first then candidate, and returns both latency reports (TTFT, time per output token).

The check proves the kernel ran: both sides count the calls that reach the target's dispatch point. A model
that never calls it (int8_linear with `model.quant=none`) is refused before the candidate runs, since identical
tokens would prove nothing; a check in which the kernel served fewer calls than the reference made fails.

    check = check_model(cfg, "rms_norm", source, workdir=run_dir / "model_check" / "rms_norm")
    check.passed, check.reason, check.to_dict()
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import sys
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from autotune.accel import queries
from autotune.errors import UserError
from autotune.sandbox.limits import Limits
from autotune.targets.base import parse_dtype

# Logit tolerance per model dtype: |candidate - reference| <= atol + rtol * max|reference| over all logits.
# fp32, measured on the tiny model (4 prompts x 8 greedy tokens, max|logit| 4.6): a correct Triton RMSNorm
# (the search baseline's) moved the logits by 1.9e-6; an RMSNorm doing its math in fp16 moved them by 1.8e-3,
# a bf16 SiLU-and-mul by 1.2e-2 -- with the same greedy tokens in all three cases, which is why tokens alone
# are not enough. The bound 1e-4 + 1e-4 * 4.6 = 5.6e-4 passes the first and fails the others. bf16 and fp16
# carry about 3 and 4 significant digits: the bound is two roundings' worth of the largest logit.
LOGIT_TOLERANCE = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (1.6e-2, 1e-2), torch.float16: (2e-3, 1e-3)}


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the model check reads from config, read once."""

    prompts: int  # run.check_prompts
    new_tokens: int  # run.check_new_tokens
    seed: int
    block_size: int  # serve.block_size: the paged cache's, as the engine serves
    limits: Limits  # the checker's, with twice the time and memory: a whole model, not one kernel

    @classmethod
    def from_config(cls, cfg: DictConfig) -> Settings:
        try:
            prompts, new_tokens, seed = int(cfg.run.check_prompts), int(cfg.run.check_new_tokens), int(cfg.seed)
            block_size = int(cfg.serve.block_size)
        except (TypeError, ValueError) as e:
            raise UserError(f"run.check_prompts, run.check_new_tokens, serve.block_size and seed must be integers "
                            f"({e})") from None
        if prompts < 1 or new_tokens < 1:
            raise UserError(f"run.check_prompts and run.check_new_tokens must be at least 1, not {prompts} and "
                            f"{new_tokens}")
        return cls(prompts, new_tokens, seed, block_size, Limits.from_config(cfg.verify).scaled(time=2, memory=2))


@dataclasses.dataclass
class ModelCheck:
    passed: bool
    reason: str
    prompts: int
    new_tokens: int
    tokens_identical: bool
    max_logit_diff: float | None
    logit_tolerance: float | None
    latency: dict | None = None  # GPU only: {"before": figures, "after": figures}, see latency_figures
    duration_s: float = 0.0
    reference_calls: int = 0  # calls the served model made to the target's dispatch point on the check's prompts
    kernel_calls: int = 0  # calls the candidate served in the same generation (must equal reference_calls)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def unreadable_checkpoint(cfg: DictConfig) -> str | None:
    """Why the sandboxed model check could not read model.checkpoint, or None. As root the sandbox runs the
    model as an unprivileged user, so the checkpoint's files must be readable by others."""
    import os

    if not cfg.model.get("checkpoint") or os.geteuid() != 0:
        return None
    root = Path(str(cfg.model.checkpoint))
    closed = [p for p in [root, *root.rglob("*")] if p.exists() and not os.stat(p).st_mode & 0o004]
    if not closed:
        return None
    return (f"model.checkpoint: {closed[0]} is not readable by other users, and the model-level check runs "
            f"the candidate's model as an unprivileged user (chmod -R o+rX {root})")


def check_model(cfg: DictConfig, target: str, source: str, *, workdir: Path) -> ModelCheck:
    from autotune.env import resolve_device
    from autotune.sandbox import run_isolated
    from autotune.serve import build_model, check_prompts, greedy_generate

    problem = unreadable_checkpoint(cfg)
    if problem:
        raise UserError(problem)
    settings = Settings.from_config(cfg)
    device = resolve_device(cfg.device)
    model = build_model(cfg.model, device)
    prompts = check_prompts(model.config.vocab_size, settings.prompts, 16, settings.seed)
    new_tokens = settings.new_tokens
    with counting(target) as calls:
        ref_tokens, ref_logits = greedy_generate(model, prompts, new_tokens, settings.block_size)
    del model
    if not calls[0]:
        return ModelCheck(False, never_called(cfg, target), len(prompts), new_tokens, False, None, None)
    payload = {"target": target, "source": source, "prompts": prompts, "new_tokens": new_tokens, "device": device,
               "block_size": settings.block_size, "cfg": OmegaConf.to_container(cfg, resolve=True)}
    checkpoint = (str(cfg.model.checkpoint),) if cfg.model.get("checkpoint") else ()
    result = run_isolated("autotune.run.model_check", payload, limits=settings.limits, workdir=workdir,
                          gpu=device == "cuda", readable=checkpoint)
    if not result.ok:
        why = result.error or (f"killed by {result.signal}" if result.signal else "") or \
            ("timed out" if result.timed_out else f"exit status {result.returncode}")
        return ModelCheck(False, f"the model did not run with the candidate: {why.strip().splitlines()[-1]}",
                          len(prompts), new_tokens, False, None, None, duration_s=result.duration_s)
    assert result.result is not None  # ok: the child exited 0 after sending its result
    check = compare(ref_tokens, ref_logits, result.result, len(prompts), new_tokens, result.duration_s)
    served = int(result.result.get("kernel_calls", 0))
    check = dataclasses.replace(check, reference_calls=calls[0], kernel_calls=served)
    if served != calls[0]:
        return dataclasses.replace(check, passed=False, reason=f"the kernel served {served} of the {calls[0]} "
                                   f"calls the model made to {target}: it did not run where the model calls it")
    return dataclasses.replace(check, reason=f"{check.reason}; the kernel served all {served} calls to {target}")


def never_called(cfg: DictConfig, target: str) -> str:
    quant = cfg.model.get("quant", "none")
    return (f"the served model (model={cfg.model.name}, model.quant={quant}) never calls {target}: a kernel for it "
            "would serve nothing, so there is nothing to check and nothing to propose (serve a model that calls "
            "it, e.g. model.quant=int8 for int8_linear)")


@contextlib.contextmanager
def counting(target: str, fn=None):
    """Route `target`'s dispatch point through a counter (around `fn`, else what it runs now); yields [calls]."""
    from autotune.serve import dispatch

    inner = fn or dispatch.current(target)
    calls = [0]

    def counted(*args):
        calls[0] += 1
        return inner(*args)

    with dispatch.using({target: counted}):
        yield calls


def compare(ref_tokens, ref_logits, got: dict, prompts: int, new_tokens: int, duration_s: float) -> ModelCheck:
    tokens, logits = got["tokens"], got["logits"]
    rtol, atol = LOGIT_TOLERANCE[parse_dtype(got["model_dtype"])]
    same = tokens.shape == ref_tokens.shape and torch.equal(tokens, ref_tokens)
    diff = (logits.float() - ref_logits.float()).abs().max().item() if logits.shape == ref_logits.shape else None
    bound = atol + rtol * ref_logits.float().abs().max().item()
    passed = same and diff is not None and diff <= bound  # a NaN difference fails the comparison too
    if not same:
        reason = f"greedy tokens differ from the reference ({_first_difference(tokens, ref_tokens)})"
    elif diff is None:
        reason = "logits have the wrong shape"
    elif not passed:
        reason = f"logits differ by {diff:.3g}, above the tolerance {bound:.3g}"
    else:
        reason = (f"same greedy tokens on {prompts} prompt{'s' * (prompts != 1)} x {new_tokens} tokens; "
                  f"max logit difference {diff:.3g}")
    return ModelCheck(passed, reason, prompts, new_tokens, same, diff, bound, got.get("latency"), duration_s)


def _first_difference(tokens, ref_tokens) -> str:
    if tokens.shape != ref_tokens.shape:
        return f"shape {list(tokens.shape)} vs {list(ref_tokens.shape)}"
    prompt, pos = (tokens != ref_tokens).nonzero()[0].tolist()
    return f"prompt {prompt}, new token {pos}: {tokens[prompt, pos].item()} vs {ref_tokens[prompt, pos].item()}"


def latency_figures(report) -> dict[str, float | None]:
    """The serving figures a reviewer compares before/after: TTFT and time per output token, p50 and p95."""
    return {"ttft_p50_ms": report.ttft_ms.p50, "ttft_p95_ms": report.ttft_ms.p95,
            "tpot_p50_ms": report.tpot_ms.p50, "tpot_p95_ms": report.tpot_ms.p95,
            "output_tokens_per_s": report.output_tokens_per_s}


# ---------------------------------------------------------------------------------------- the child side

def _load_candidate(target: str, source: str):
    queries.answer()  # the launcher's device queries answered as in the checker's host (no GPU: SM90's)
    path = Path("candidate_model_check.py").resolve()
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("candidate_model_check", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import the candidate from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return getattr(module, target)


def _child(payload: dict, send) -> dict:
    from autotune.serve import build_model, dispatch, greedy_generate, make_requests, serve

    cfg = OmegaConf.create(payload["cfg"])
    fn = _load_candidate(payload["target"], payload["source"])
    model = build_model(cfg.model, payload["device"])
    out: dict[str, Any] = {"model_dtype": str(cfg.model.dtype)}
    if payload["device"] == "cuda":  # latency before and after, in one process, reference first
        requests = make_requests(cfg.workload, model.config.vocab_size, model.config.max_seq_len)
        before = latency_figures(serve(cfg, model=model, requests=requests))
        with dispatch.using({payload["target"]: fn}):
            after = latency_figures(serve(cfg, model=model, requests=requests))
        out["latency"] = {"before": before, "after": after}
    with counting(payload["target"], fn) as calls:
        tokens, logits = greedy_generate(model, payload["prompts"], payload["new_tokens"], payload["block_size"])
    out.update(tokens=tokens.cpu(), logits=logits.float().cpu(), kernel_calls=calls[0])
    return out


if __name__ == "__main__":
    from autotune.sandbox import child_main

    child_main(_child)
