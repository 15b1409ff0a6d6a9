"""The run stage: `autotune run`, the whole loop, and what it is made of.

- `loop.py`: the loop itself, `main(cfg)`: profile, choose targets, search and judge each, the model-level
  check, publish; the run directory and its summary (read it top to bottom);
- `model_check.py`: the best candidate inside the whole served model, sandboxed, before anything is proposed;
- `progress.py`: the live table on a terminal and one line per ledger record in cli.log;
- `sweep.py`: what became of each job of `autotune run -m`, and how to resume the ones that died;
- `command.py`: the command's entry, `main(argv)`, through hydra.main (run directory, sweeps, launchers).

Importing this package imports none of them: the sandboxed model check's child runs `autotune.run.model_check`.
"""
