"""Live engines: drive a running (or launched) vLLM or SGLang server, measure it, profile it, A/B it.

    from autotune.engine import profile_engine, bench
    result, load = profile_engine(compose(["engine=vllm", "engine.url=http://127.0.0.1:8000",
                                           "engine.profile_dir=/tmp/prof"]))

One module per concern: settings (conf/engine/ as a frozen record), workload (the requests: sampled, replayed,
or an agent's transcript), load (the streaming load generator), stats (TTFT/TPOT/ITL/end-to-end percentiles,
throughput, errors), launch (start, wait for, stop a server), endpoints (the profiler's start/stop and the
worker's trace), profile (`autotune profile engine=...`), bench (`autotune bench`: A/B, outputs, the gate),
selfopt (the run whose agent is served by the engine it tunes).
"""

from autotune.engine.profile import profile_engine
from autotune.engine.settings import EngineSettings
from autotune.engine.stats import LoadReport, RequestResult

__all__ = ["EngineSettings", "LoadReport", "RequestResult", "profile_engine"]
