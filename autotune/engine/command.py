"""`autotune bench`: the workload against engine setups A and B, the side-by-side table and the upgrade gate.

    autotune bench engine=vllm engine.launch=true engine.model=PATH engine.python=PATH \
        +bench.b.plugin=dist/vllm-plugin bench.margin=0.05            # without and with the exported plugin
    autotune bench engine=vllm engine.launch=true engine.model=PATH \
        +bench.a.python=/venvs/vllm-0.32/bin/python +bench.b.python=/venvs/vllm-0.33/bin/python bench.margin=0.05
    autotune bench engine=vllm +bench.a.url=http://127.0.0.1:8000 +bench.b.url=http://127.0.0.1:8001

Each setup is `engine` with `bench.a` / `bench.b` replacing settings (launched servers are restarted between
setups); A and B alternate `bench.rounds` times and serve the workload `bench.repeats` times per start, so that
the noise is measured (the ± in the table). B's greedy outputs on `bench.prompts` fixed prompts must equal
A's. With `bench.margin=M`, exit 1 when B is worse than A by more than M outside the noise on throughput,
TTFT/TPOT p50/p95 or end-to-end p95, has more failed requests, or answers differently (the gate before
rolling out an engine upgrade or a kernel). `bench.per_kernel=true` also benches B with each plugin kernel
alone. Writes bench/<run>/bench.json and bench.md. On a CPU the plugin's Triton kernels run under the
interpreter, so B is much slower there: the outputs' equality is what such a bench shows.
"""

from __future__ import annotations

from omegaconf import DictConfig

from autotune import text
from autotune.engine.bench import bench, markdown

USAGE = "autotune bench engine=vllm|sglang [+bench.b.KEY=VALUE ...] [bench.margin=0.05] [key=value ...]"


def main(argv: list[str]) -> int:
    """The command's entry (every command's is `main(argv)` in its stage's command.py)."""
    from autotune.config import from_argv
    from autotune.errors import UserError

    cfg, rest = from_argv(argv)
    if rest:
        raise UserError(f"unexpected argument(s) {' '.join(rest)} (usage: {USAGE})")
    return run_bench(cfg)


def run_bench(cfg: DictConfig) -> int:
    console = text.console(highlight=False)
    record = bench(cfg)
    console.print(markdown(record), soft_wrap=True)
    console.print(f"wrote {record['dir']}/ (bench.json, bench.md)")
    from autotune.publish import attach_bench

    for pid in attach_bench(cfg, record):
        console.print(f"added to the evidence of {pid} (`autotune review show {pid}`)")
    gate = record["gate"]
    return 0 if gate is None or gate["passed"] else 1
