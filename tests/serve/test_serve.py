"""`autotune.serve.serve` on the default config: the tiny model under the mixed workload, in real time."""

import time

from autotune.config import compose
from autotune.serve import serve


def test_serve_the_default_config_in_seconds():
    cfg = compose([])
    start = time.perf_counter()
    report = serve(cfg)
    elapsed_s = time.perf_counter() - start
    assert report.num_requests == cfg.workload.num_requests
    assert report.output_tokens > 0 and report.output_tokens_per_s > 0
    assert report.ttft_ms.p50 <= report.e2e_ms.p50
    assert elapsed_s < 30  # about 1 s on 2 idle CPU cores (the arrivals alone span ~0.4 s); 9 s seen under load


def test_serve_takes_a_model_and_requests(tiny):
    from autotune.serve import Request

    report = serve(compose(["serve.max_batch_size=2", "serve.max_batched_tokens=4"]), model=tiny,
                   requests=[Request(0, [1, 2, 3, 4, 5, 6], 3), Request(1, [9], 2), Request(2, [3, 3], 1)])
    assert [r.output_tokens for r in report.requests] == [3, 2, 1]
