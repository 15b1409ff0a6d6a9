"""The `autotune` command: `autotune <command> [arguments] [key=value ...]`.

Each command's entry is `main(argv)` in `autotune/<package>/command.py` (PACKAGE below); it reads the Hydra config
in conf/ with the overrides given; `run` goes through `hydra.main` so that sweeps (`autotune run -m
agent.turns=1,3`) and launchers work.
"""

from __future__ import annotations

import importlib
import os
import sys
import textwrap

from autotune.errors import UserError

COMMANDS = {
    "profile": "serve the model under the workload with torch.profiler; write traces/<run>/ and rank hot spots",
    "verify": "judge one candidate kernel file against a target in an isolated process",
    "run": "the whole loop: profile, agent, verify, ledger, publish proposals for review",
    "review": "list, show, approve (merge) or reject proposals",
    "report": "read run and sweep directories into report.html, report.md, CSVs and plots",
    "regress": "re-check every merged kernel on this environment against its recorded verdict",
    "export": "write the merged kernels as a vLLM plugin package or a transformers patch package",
    "bench": "serve one workload against two engine setups (A/B): the side-by-side table and the upgrade gate",
}

# Each command's entry is `main(argv) -> int` in `autotune/<package>/command.py`, which also holds its USAGE line
# and, as its docstring, its help text.
PACKAGE = {"profile": "profile", "verify": "verify", "run": "run", "review": "publish", "report": "report",
           "regress": "regress", "export": "export", "bench": "engine"}


def entry(command: str):
    return importlib.import_module(f"autotune.{PACKAGE[command]}.command")


EXAMPLES = {
    "profile": ["autotune profile", "autotune profile model=llama3_8b workload=chat device=cuda",
                "autotune profile trace=vllm_traces/rank0.pt.trace.json.gz", "autotune profile kernels.enable=true"],
    "verify": ["autotune verify rms_norm my_kernel.py", "autotune verify silu_and_mul k.py --json verify.seeds=3"],
    "run": ["autotune run", "autotune run agent=openai agent.base_url=http://127.0.0.1:8000/v1 agent.model=qwen "
            "agent.turns=3 agent.candidates=2 targets=[rms_norm]", "autotune run resume=runs/2026-11-30/21-04-11",
            "autotune run -m agent.turns=1,3 targets=[rms_norm],[silu_and_mul]"],
    "review": ["autotune review list", "autotune review show rms_norm-1a2b3c",
               "autotune review approve rms_norm-1a2b3c",
               "autotune review reject rms_norm-1a2b3c --reason \"slower than torch.compile at 8192 rows\""],
    "report": ["autotune report multirun/2026-11-30/21-00-00", "autotune report runs/2026-11-30/* --out report"],
    "regress": ["autotune regress", "autotune regress --margin 0.03 --out regress.md kernels.dir=kernels"],
    "export": ["autotune export vllm --out dist/vllm-plugin", "autotune export hf",
               "autotune export vllm kernels.dir=PATH"],
    "bench": ["autotune bench engine=vllm engine.launch=true engine.model=PATH engine.python=PATH "
              "+bench.b.plugin=dist/vllm-plugin bench.margin=0.05",
              "autotune bench engine=vllm +bench.a.url=http://127.0.0.1:8000 +bench.b.url=http://127.0.0.1:8001"],
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(top_help())
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        return fail(f"unknown command '{command}' (commands: {', '.join(COMMANDS)}; see `autotune --help`)")
    if "-h" in rest or "--help" in rest:
        print(command_help(command))
        return 0
    try:
        return _dispatch(command, rest)
    except UserError as e:
        return fail(str(e))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `autotune review show ID | head`: the reader left, which is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _dispatch(command: str, args: list[str]) -> int:
    return entry(command).main(args)


def _groups_text() -> str:
    from autotune.config import groups

    lines = [f"  {g + '=':<16} {' | '.join(opts)}" for g, opts in groups().items()]
    return "\n".join(lines)


def top_help() -> str:
    cmds = "\n".join(f"  {c:<8} {d}" for c, d in COMMANDS.items())
    return textwrap.dedent("""\
        autotune: profile a served LLM, have an agent write Triton kernels for its hot spots, prove each
        candidate correct (and faster, on a GPU) with a checker it cannot fool, and propose the winners
        as reviewed pull requests.

        usage: autotune <command> [arguments] [key=value ...]

        commands:
        {cmds}

        Settings live in conf/ (Hydra). Override any key with key=value, swap a preset with group=name:
        {groups}

        Examples:
          autotune profile
          autotune run agent=openai agent.base_url=http://127.0.0.1:8000/v1 agent.model=my-model
          autotune verify rms_norm my_kernel.py --json

        `autotune <command> --help` explains one command; `autotune run --cfg job` prints the resolved config.
        """).format(cmds=cmds, groups=_groups_text())


def command_help(command: str) -> str:
    examples = "\n".join(f"  {e}" for e in EXAMPLES[command])
    module = entry(command)
    return (f"usage: {module.USAGE}\n\n{COMMANDS[command][0].upper()}{COMMANDS[command][1:]}.\n\n"
            f"{(getattr(module, 'HELP', None) or module.__doc__).strip()}\n\n"
            f"Presets (group=name):\n{_groups_text()}\n\nExamples:\n{examples}\n")


if __name__ == "__main__":
    sys.exit(main())
