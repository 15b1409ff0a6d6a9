"""The `autotune` command: `autotune <command> [arguments] [key=value ...]`.

Each command reads the Hydra config in conf/ with the overrides given; `run` goes through
`hydra.main` so that sweeps (`autotune run -m agent.turns=1,3`) and launchers work.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import textwrap
from pathlib import Path

from autotune.errors import UserError

COMMANDS = {
    "profile": "serve the model under the workload with torch.profiler; write traces/<run>/ and rank hot spots",
    "verify": "judge one candidate kernel file against a target in an isolated process",
    "run": "the whole loop: profile, agent, verify, ledger, publish proposals for review",
    "review": "list, show, approve (merge) or reject proposals",
    "report": "read run and sweep directories into report.html, report.md, CSVs and plots",
    "regress": "re-check every merged kernel on this environment against its recorded verdict",
    "export": "write the merged kernels as a vLLM plugin package or a transformers patch package",
    "bench": "serve the workload on two engine setups (A/B), compare them side by side; the upgrade gate",
}

USAGE = {
    "profile": "autotune profile [trace=PATH] [key=value ...]",
    "verify": "autotune verify TARGET FILE [--json] [key=value ...]",
    "run": "autotune run [-m] [resume=RUN_DIR] [key=value ...]",
    "review": "autotune review list | show ID | approve ID | reject ID --reason TEXT  [key=value ...]",
    "report": "autotune report RUN_OR_SWEEP_DIR... [--out DIR]",
    "regress": "autotune regress [--margin 0.05] [--out regress.md] [key=value ...]",
    "export": "autotune export vllm|hf [--out DIR] [key=value ...]",
    "bench": "autotune bench engine=vllm|sglang [+bench.b.KEY=VALUE ...] [bench.margin=0.05] [key=value ...]",
}

EXAMPLES = {
    "profile": ["autotune profile", "autotune profile model=llama3_8b workload=chat device=cuda",
                "autotune profile trace=vllm_traces/rank0.pt.trace.json.gz", "autotune profile kernels.enable=true"],
    "verify": ["autotune verify rms_norm my_kernel.py", "autotune verify silu_and_mul k.py --json verify.seeds=3"],
    "run": ["autotune run", "autotune run agent=openai agent.base_url=http://127.0.0.1:8000/v1 agent.model=qwen "
            "agent.turns=3 agent.candidates=2 targets=[rms_norm]", "autotune run resume=runs/2026-11-30/21-04-11",
            "autotune run -m agent.turns=1,3 targets=[rms_norm],[silu_and_mul]"],
    "review": ["autotune review list", "autotune review show rms_norm-1a2b3c", "autotune review approve rms_norm-1a2b3c",
               "autotune review reject rms_norm-1a2b3c --reason \"slower than torch.compile at 8192 rows\""],
    "report": ["autotune report multirun/2026-11-30/21-00-00", "autotune report runs/2026-11-30/* --out report"],
    "regress": ["autotune regress", "autotune regress --margin 0.03 --out regress.md kernels.dir=kernels"],
    "export": ["autotune export vllm --out dist/vllm-plugin", "autotune export hf", "autotune export vllm kernels.dir=PATH"],
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


def _split(args: list[str]) -> tuple[list[str], list[str]]:
    """(overrides, everything else): an override is key=value and does not start with '-'."""
    overrides = [a for a in args if "=" in a and not a.startswith("-")]
    return overrides, [a for a in args if a not in overrides]


def _dispatch(command: str, args: list[str]) -> int:
    from autotune.config import compose

    overrides, rest = _split(args)
    if command == "run":
        return _hydra_run(args, overrides, rest)
    if command == "verify":
        parser = _ArgParser(prog="autotune verify", add_help=False)
        parser.add_argument("target")
        parser.add_argument("file")
        parser.add_argument("--json", action="store_true")
        ns = parser.parse_args(rest)
        return importlib.import_module("autotune.verify.command").main(compose(overrides), ns.target, ns.file, ns.json)
    if command == "review":
        return importlib.import_module("autotune.publish.review").main(compose(overrides), rest)
    if command == "report":  # paths, not overrides: a run dir may contain '=' only by accident
        return importlib.import_module("autotune.report").main(args)
    if command == "regress":
        return importlib.import_module("autotune.regress").main(compose(overrides), rest)
    if command == "export":
        return importlib.import_module("autotune.export.command").main(compose(overrides), rest)
    if rest:
        raise UserError(f"unexpected argument(s) {' '.join(rest)} (usage: {USAGE[command]})")
    if command == "bench":
        return importlib.import_module("autotune.engine.command").main(compose(overrides))
    return importlib.import_module("autotune.profile.command").main(compose(overrides))


def _hydra_run(args: list[str], overrides: list[str], rest: list[str]) -> int:
    """`autotune run` through hydra.main (run dir, sweeps, launchers), after checking the overrides here."""
    import hydra

    from autotune.config import compose, conf_dir

    sweeping = "-m" in rest or "--multirun" in rest
    if not sweeping and not any(a.startswith("--") for a in rest):
        cfg = compose(overrides)  # a one-line error for a bad override before Hydra starts
        if cfg.resume and not (Path(cfg.resume) / "config.yaml").is_file():
            raise UserError(f"resume={cfg.resume} is not an autotune run directory (it has no config.yaml); "
                            "pass the folder `autotune run` printed at its start")
    status = {"code": 0}

    @hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")
    def _app(cfg) -> None:
        from autotune.run import main as run_main

        try:
            status["code"] = max(status["code"], run_main(cfg) or 0)
        except UserError as e:
            status["code"] = fail(str(e))
            if not sweeping:
                raise SystemExit(status["code"])

    saved = sys.argv
    sys.argv = ["autotune run", *args]
    try:
        _app()
    except SystemExit as e:  # Hydra's own exit (a launcher error, say): still account for the jobs
        status["code"] = max(status["code"], e.code if isinstance(e.code, int) else 1)
    finally:
        sys.argv = saved
    if sweeping:
        return max(status["code"], _sweep_end())
    return status["code"]


def _sweep_end() -> int:
    """After a sweep, whatever the launcher: each job's state, and the resume command of each that died."""
    from autotune.run import console
    from autotune.sweep import SWEEP_DIR, jobs, print_jobs

    if not SWEEP_DIR:
        return 0
    return 1 if print_jobs(jobs(SWEEP_DIR[-1]), console) else 0


class _ArgParser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, our format, exit 2
        raise UserError(f"{message} (usage: {USAGE['verify']})")


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
    return (f"usage: {USAGE[command]}\n\n{COMMANDS[command][0].upper()}{COMMANDS[command][1:]}.\n\n"
            f"{importlib.import_module(_doc_module(command)).__doc__.strip()}\n\n"
            f"Presets (group=name):\n{_groups_text()}\n\nExamples:\n{examples}\n")


def _doc_module(command: str) -> str:
    return {"profile": "autotune.profile.command", "verify": "autotune.verify.command", "run": "autotune.run",
            "review": "autotune.publish.review", "report": "autotune.report", "regress": "autotune.regress",
            "export": "autotune.export.command", "bench": "autotune.engine.command"}[command]


if __name__ == "__main__":
    sys.exit(main())
