"""`autotune run`: the command's entry, through hydra.main (the run directory, sweeps with `-m`, launchers).

A single run's overrides are composed and checked here first (`loop.preflight`), so that a bad setting is one
line and leaves no run directory behind; the loop itself is `autotune.run.loop.main`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from autotune.errors import UserError
from autotune.run import loop

HELP = loop.__doc__  # `autotune run --help`: the loop's own account of itself
USAGE = "autotune run [-m] [resume=RUN_DIR] [key=value ...]"


def main(argv: list[str]) -> int:
    """The command's entry (every command's is `main(argv)` in its stage's command.py)."""
    import hydra

    from autotune.cli import fail
    from autotune.config import compose, conf_dir, split_overrides

    overrides, rest = split_overrides(argv)
    sweeping = "-m" in rest or "--multirun" in rest
    if not sweeping and not any(a.startswith("--") for a in rest):
        check(compose(overrides))  # a one-line error for a bad setting before Hydra starts
    status = {"code": 0}

    @hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")
    def _app(cfg) -> None:
        from autotune.run.loop import main as run_main

        try:
            status["code"] = max(status["code"], run_main(cfg) or 0)
        except UserError as e:
            status["code"] = fail(str(e))
            if not sweeping:
                raise SystemExit(status["code"]) from None

    saved = sys.argv
    sys.argv = ["autotune run", *argv]
    try:
        _app()
    except SystemExit as e:  # Hydra's own exit (a launcher error, say): still account for the jobs
        status["code"] = max(status["code"], e.code if isinstance(e.code, int) else 1)
    finally:
        sys.argv = saved
    if sweeping:
        return max(status["code"], _sweep_end())
    return status["code"]


def check(cfg) -> None:
    """A resume of a folder that is no run, or a new run's settings that cannot work: refused before Hydra makes
    the run directory."""
    from autotune.run.loop import preflight

    if cfg.resume and not (Path(cfg.resume) / "config.yaml").is_file():
        raise UserError(f"resume={cfg.resume} is not an autotune run directory (it has no config.yaml); "
                        "pass the folder `autotune run` printed at its start")
    if not cfg.resume:
        preflight(cfg, publish=True)


def _sweep_end() -> int:
    """After a sweep, whatever the launcher: each job's state, and the resume command of each that died."""
    from autotune.run.loop import console
    from autotune.run.sweep import SWEEP_DIR, jobs, print_jobs

    if not SWEEP_DIR:
        return 0
    return 1 if print_jobs(jobs(SWEEP_DIR[-1]), console) else 0
