"""Which op in a trace computes which target, and where the target's case lies in its arguments.

The names come from three places, later ones overriding earlier ones:
1. our own dispatch points, `autotune::<target>`, whose first argument is the case tensor;
2. each target's `foreign_ops` (autotune/targets/<op>.py): vLLM's `_C::` and `vllm_ir::` ops, SGLang's
   `sgl_kernel::` ops, with argument positions and shape rules (base.ForeignOp);
3. the user's: `profile.target_map` and then `profile.target_map_file=PATH` (YAML or JSON), each
   `{op name: target}`, `{op name: {target: T, input: K}}` (K: the argument holding the case tensor) or
   `{op name: {target: T, like: OP}}` (the call laid out as the declared op OP's: `like: _C::rotary_embedding`).

Hydra reads `::` in an override's dict as separators, so `+profile.target_map={my::op: rms_norm}` arrives
as `{"my": ":op: rms_norm"}`; that shape is refused with the escaped form to use instead.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from autotune import targets
from autotune.errors import UserError
from autotune.targets.base import ForeignOp

OWN_PREFIX = "autotune::"


@dataclasses.dataclass(frozen=True)
class MappedOp:
    """A trace op name's target and how to read the target's case from its arguments."""

    target: str
    foreign: ForeignOp


OpMap = Mapping[str, MappedOp]


def declared_map() -> dict[str, MappedOp]:
    """Our dispatch points and every target's declared foreign ops."""
    found = {}
    for t in targets.all_targets():
        found[OWN_PREFIX + t.name] = MappedOp(t.name, ForeignOp(OWN_PREFIX + t.name))
        for f in t.foreign_ops:
            found[f.name] = MappedOp(t.name, f)
    return found


def build_map(target_map: Mapping[str, Any] | None = None, target_map_file: str | Path | None = None,
              ) -> dict[str, MappedOp]:
    """declared_map() with the user's entries from profile.target_map and profile.target_map_file on top."""
    found = declared_map()
    found.update(user_entries(target_map or {}, "profile.target_map"))
    if target_map_file:
        found.update(user_entries(read_map_file(target_map_file), f"profile.target_map_file={target_map_file}"))
    return found


def read_map_file(path: str | Path) -> Mapping[str, Any]:
    """A YAML or JSON file of {op name: entry}; UserError when missing or not such a mapping."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"profile.target_map_file={path}: no such file (give a YAML or JSON file of "
                        "{op name: target} entries)")
    try:
        text = path.read_text()
        content = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as e:
        raise UserError(f"profile.target_map_file={path} is not readable YAML/JSON ({e})") from None
    if not isinstance(content, Mapping):
        raise UserError(f"profile.target_map_file={path} must hold a mapping {{op name: target}}, "
                        f"not {type(content).__name__}")
    return content


def user_entries(entries: Mapping[str, Any], source: str) -> dict[str, MappedOp]:
    """Validated user entries; a UserError names the bad one and what to write instead."""
    return {str(name): _entry(str(name), entry, source) for name, entry in entries.items()}


def _entry(name: str, entry: Any, source: str) -> MappedOp:
    if isinstance(entry, str) and entry.startswith(":") and "::" not in name:
        rest, _, target = entry[1:].partition(":")
        op, escaped = f"{name}::{rest}", f"{name}\\:\\:{rest}"
        raise UserError(f"{source}: the entry '{name}: {entry}' is '{op}: {target.strip()}' split at its '::' by "
                        f"Hydra's override grammar; escape the colons, in single quotes: "
                        f"'+profile.target_map={{{escaped}: {target.strip() or 'TARGET'}}}', or put the names in "
                        "a YAML file given as profile.target_map_file=PATH")
    if isinstance(entry, str):
        entry = {"target": entry}
    if not isinstance(entry, Mapping) or "target" not in entry:
        raise UserError(f"{source}: the entry for '{name}' must be a target name, {{target: T, input: K}} or "
                        f"{{target: T, like: OP}}, not {entry!r}")
    unknown = set(entry) - {"target", "input", "like"}
    if unknown:
        raise UserError(f"{source}: the entry for '{name}' has unknown keys {sorted(unknown)} "
                        "(allowed: target, input, like)")
    target = targets.get(str(entry["target"])).name  # UserError listing the known targets
    if "like" in entry:
        return MappedOp(target, _like(name, str(entry["like"]), target, source))
    try:
        foreign = ForeignOp(name, int(entry.get("input", 0)))
    except (TypeError, ValueError) as e:
        raise UserError(f"{source}: the entry for '{name}' has a bad argument position ({e})") from None
    return MappedOp(target, foreign)


def _like(name: str, like: str, target: str, source: str) -> ForeignOp:
    """The declared op `like`'s argument positions and shape rules under the name `name`."""
    declared = {n: m for n, m in declared_map().items() if m.target == target}
    if like not in declared:
        raise UserError(f"{source}: the entry for '{name}' is like '{like}', which is not one of {target}'s declared "
                        f"ops ({', '.join(declared)})")
    return dataclasses.replace(declared[like].foreign, name=name)
