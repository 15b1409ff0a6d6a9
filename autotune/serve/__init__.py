"""Serving: the built-in Llama-style model, the iteration-level batching engine and the workload.

`serve(cfg)` builds `cfg.model` on `cfg.device`, makes the requests of `cfg.workload` and serves them
in real time with the `cfg.serve` limits, returning a `ServeReport` (TTFT, TPOT, end-to-end latency
percentiles, tokens/s). Every op a kernel may replace runs through `autotune.serve.dispatch`.

    from autotune.config import compose
    from autotune.serve import serve
    print(serve(compose(["workload.num_requests=8"])).summary())
"""

from __future__ import annotations

from autotune.serve.engine import Engine, Request, ServeReport
from autotune.serve.model import LlamaModel, build_model, check_prompts, greedy_generate
from autotune.serve.report import print_report
from autotune.serve.workload import make_requests

__all__ = ["Engine", "LlamaModel", "Request", "ServeReport", "build_model", "check_prompts", "greedy_generate",
           "make_requests", "print_report", "serve"]


def serve(cfg, *, model: LlamaModel | None = None, requests: list[Request] | None = None) -> ServeReport:
    """Serve cfg.workload (or `requests`) on cfg.model (or `model`) on resolve_device(cfg.device)."""
    from autotune.env import resolve_device

    if model is None:
        model = build_model(cfg.model, resolve_device(cfg.device))
    if requests is None:
        requests = make_requests(cfg.workload, model.config.vocab_size, model.config.max_seq_len)
    engine = Engine(model, max_batch_size=int(cfg.serve.max_batch_size),
                    max_batched_tokens=int(cfg.serve.max_batched_tokens), time_scale=float(cfg.serve.time_scale),
                    block_size=int(cfg.serve.block_size))
    return engine.run(requests)
