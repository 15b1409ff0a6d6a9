"""Where the configuration (`conf/`) and the prompt templates (`prompts/`) are, and loading the Hydra configuration
with one-line errors for bad overrides.

`conf/` and `prompts/` sit at the top of the repository, beside `autotune/`, as their one source; a wheel ships them
inside the package (as `autotune/conf/` and `autotune/prompts/`: the mapping is in setup.py). `CONF_DIR` and
`PROMPTS_DIR` find either, so a checkout, an editable install and a wheel install read the same files.

`compose(overrides)` is what every command uses; `autotune run` hands the same overrides to
`hydra.main` afterwards so that sweeps (`-m`) and launchers work, but it validates them here first.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from omegaconf import DictConfig, ListConfig, OmegaConf

from autotune.errors import UserError

PACKAGE_DIR = Path(__file__).resolve().parent


def _data_dir(name: str, package: Path = PACKAGE_DIR) -> Path:
    """`autotune/<name>/` in a wheel install, else `<name>/` beside the package (a checkout or an editable install).
    Inside first: beside an installed package is site-packages, where another distribution may have put a `conf/`."""
    inside = package / name
    return inside if inside.is_dir() else package.parent / name


CONF_DIR = _data_dir("conf")
PROMPTS_DIR = _data_dir("prompts")

# `${first:a,b}`: a unless it is null or empty, else b (e.g. the run dir: the resumed one, else a new one).
if not OmegaConf.has_resolver("first"):
    OmegaConf.register_new_resolver("first", lambda a, b: b if a in (None, "") else a)


def conf_dir() -> Path:
    if not (CONF_DIR / "config.yaml").is_file():
        raise UserError(f"no config found at {CONF_DIR}: this autotune install lacks its package data (reinstall it: "
                        "`pip install --force-reinstall autotune` or `pip install -e .` from a checkout)")
    return CONF_DIR


def groups() -> dict[str, list[str]]:
    """Config groups and their presets, e.g. {"model": ["llama3_8b", "tiny"], ...}."""
    found = {}
    for d in sorted(p for p in conf_dir().iterdir() if p.is_dir()):
        if d.name == "hydra":  # Hydra's own groups: conf/hydra/launcher/ holds the sweep launchers
            found.update({f"hydra/{s.name}": sorted(f.stem for f in s.glob("*.yaml")) for s in sorted(d.iterdir())
                          if s.is_dir()})
        else:
            found[d.name] = sorted(f.stem for f in d.glob("*.yaml"))
    return found


def compose(overrides: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """The resolved config for these `key=value` overrides; a UserError for anything wrong."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    for o in overrides:
        if "=" not in o:
            raise UserError(f"'{o}' is not an override: settings are given as key=value (see `autotune --help`)")
    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=list(overrides))
            OmegaConf.resolve(cfg)
    except (HydraException, OmegaConfBaseException) as e:
        raise UserError(explain(e, overrides)) from None
    return cfg


def explain(e: Exception, overrides) -> str:
    """Hydra's multi-line messages turned into one line that says what to do."""
    text = str(e)
    m = re.search(r"Could not find '([\w/]+)/([\w.-]+)'", text)
    if m:
        group, name = m.groups()
        options = ", ".join(groups().get(group, [])) or "none"
        return f"unknown {group} preset '{name}' (available: {options})"
    m = re.search(r"Could not override '([^']+)'", text) or re.search(r"Key '([^']+)' is not in struct", text)
    if m:
        return f"unknown setting '{m.group(1)}' (see `autotune --help` for the settings; add new keys with +key=value)"
    m = re.search(r"Ambiguous value for argument '([^']+)'", text)
    if m:
        return f"ambiguous value in '{m.group(1)}': quote it, use [a,b] for a list, or add -m to sweep"
    first = text.strip().splitlines()[0] if text.strip() else type(e).__name__
    return f"bad configuration ({' '.join(overrides)}): {first}"


def split_overrides(args: list[str]) -> tuple[list[str], list[str]]:
    """(overrides, everything else): an override is key=value and does not start with '-'."""
    overrides = [a for a in args if "=" in a and not a.startswith("-")]
    return overrides, [a for a in args if a not in overrides]


def from_argv(argv: list[str]) -> tuple[DictConfig, list[str]]:
    """A command's arguments as (the config composed from its key=value overrides, the other arguments)."""
    overrides, rest = split_overrides(argv)
    return compose(overrides), rest


def as_dict(node: DictConfig | Mapping[str, Any] | None, *, resolve: bool = True) -> dict[str, Any]:
    """A config node (or a plain mapping) as a plain dict, interpolations resolved unless told not to; None is {}."""
    if isinstance(node, DictConfig):  # a DictConfig's container is a dict with string keys
        return cast("dict[str, Any]", OmegaConf.to_container(node, resolve=resolve))
    return dict(node or {})


def to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg, resolve=True)


@functools.lru_cache(maxsize=1)
def model_presets() -> tuple[dict, ...]:
    """Every model preset in conf/model/ as a plain dict: the sizes and scalars each model is served with (the
    checker runs an op at every preset's shapes)."""
    return tuple(as_dict(cast(DictConfig, OmegaConf.load(p))) for p in sorted((conf_dir() / "model").glob("*.yaml")))


def chosen_presets(names: Any) -> tuple[dict, ...]:
    """The presets `verify.models` names: "all" (every one in conf/model/) or a list of names."""
    presets = model_presets()
    if str(names) == "all":
        return presets
    known = {p["name"]: p for p in presets}
    wanted = [str(n) for n in names] if isinstance(names, (list, tuple, ListConfig)) else None
    unknown = [n for n in wanted or [] if n not in known]
    if not wanted or unknown:
        raise UserError(f"verify.models={names}: give all, or a list of model presets from {sorted(known)}"
                        + (f" ({', '.join(unknown)} is not one)" if unknown else ""))
    return tuple(known[n] for n in wanted)


@functools.lru_cache(maxsize=1)
def served_rows() -> int:
    """The most tokens the engine serves in one step (`serve.max_batched_tokens` of conf/config.yaml)."""
    return int(OmegaConf.load(conf_dir() / "config.yaml").serve.max_batched_tokens)
