"""A pip-installable package that carries the merged kernels out of this repository.

`write_package(kind, kernels_dir, out)` picks the kernel each target's served model would use
(`autotune.kernels.best`: accepted with the best speedup, else the most recently merged correct one), copies
its kernel.py to `<package>/kernels/<target>.py`, writes `manifest.json` (target -> kernel id, status,
sha256 of the file) and the package's runtime module (`vllm_plugin.py` or `hf_patch.py`, copied as its
`__init__.py`), and a pyproject.toml; `pip install DIR` installs it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from autotune import kernels, targets
from autotune.accel import queries
from autotune.errors import UserError
from autotune.export import vllm_moe

HERE = Path(__file__).parent


@dataclasses.dataclass(frozen=True)
class PackageKind:
    """What differs between the vLLM plugin and the transformers package."""

    package: str  # the import name; the distribution name is the same with dashes
    runtime: str  # the module in autotune/export/ copied as the package's __init__.py
    summary: str
    supported: tuple[str, ...]  # the targets the runtime knows how to plug in
    entry_points: str = ""  # pyproject lines after [project.entry-points...]


VLLM = PackageKind("autotune_vllm_kernels", "vllm_plugin.py",
                   "vLLM plugin: kernels merged by autotune, registered with vLLM",
                   ("rms_norm", "fused_add_rms_norm", "rotary_embedding", "silu_and_mul", "fused_moe",
                    "paged_attention"),
                   '[project.entry-points."vllm.general_plugins"]\n'
                   'autotune_kernels = "autotune_vllm_kernels:register"\n')
HF = PackageKind("autotune_hf_kernels", "hf_patch.py",
                 "transformers patch: kernels merged by autotune in Llama-style and MoE models",
                 ("rms_norm", "rotary_embedding", "silu_and_mul", "fused_moe"))


@dataclasses.dataclass(frozen=True)
class ExportedPackage:
    out: Path
    package: str
    kernels: dict[str, str]  # target -> kernel id
    skipped: dict[str, str]  # target -> why it is not in the package


def write_package(kind: PackageKind, kernels_dir: str | Path, out: str | Path) -> ExportedPackage:
    """Write the package for `kind` into `out` (created; refused when it holds anything but a former export)."""
    chosen, skipped = _choose(kind, Path(kernels_dir))
    out = Path(out)
    _prepare(out, kind)
    root = out / kind.package
    (root / "kernels").mkdir(parents=True)
    (root / "kernels" / "__init__.py").write_text('"""The merged kernels, one module per target."""\n')
    # the GPU the kernels were judged for: a launcher's device queries are answered so where no GPU is (the
    # interpreter), as the checker answered them (autotune.accel.queries)
    manifest: dict[str, Any] = {"kernels": {}, "judged_for": queries.SM90.to_dict()}
    for target, k in chosen.items():
        data = k.source_path.read_bytes()
        (root / "kernels" / f"{target}.py").write_bytes(data)
        manifest["kernels"][target] = {"id": k.id, "status": k.status, "sha256": hashlib.sha256(data).hexdigest()}
    if kind is VLLM and "fused_moe" in chosen:  # vLLM's own tuned-configuration files, when they describe it
        files, why = vllm_moe.write_config_files(chosen["fused_moe"].source_path.read_text(),
                                                 chosen["fused_moe"].provenance, root / "moe_configs")
        manifest["moe_configs"] = {"files": files, "why_none": why}
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    shutil.copyfile(HERE / kind.runtime, root / "__init__.py")
    shutil.copyfile(HERE / "devices.py", root / "devices.py")  # the runtime's device queries where no GPU is
    (out / "pyproject.toml").write_text(_pyproject(kind))
    return ExportedPackage(out, kind.package, {t: k.id for t, k in chosen.items()}, skipped)


def _choose(kind: PackageKind, kernels_dir: Path) -> tuple[dict[str, kernels.MergedKernel], dict[str, str]]:
    if not kernels_dir.is_dir():
        raise UserError(f"kernels dir {kernels_dir.resolve()} does not exist (approve a proposal with "
                        "`autotune review approve ID`, or set kernels.dir=PATH)")
    chosen, skipped = {}, {}
    for name in targets.NAMES:
        k = kernels.best(kernels_dir, name)
        if k is None:
            continue
        if name in kind.supported:
            chosen[name] = k
        else:
            skipped[name] = f"no {kind.package} hook for {name} yet"
    if not chosen:
        raise UserError(f"no merged kernel judged correct under {kernels_dir} for {', '.join(kind.supported)} "
                        "(approve a proposal with `autotune review approve ID`, or set kernels.dir=PATH)")
    return chosen, skipped


def _prepare(out: Path, kind: PackageKind) -> None:
    """An empty or absent folder, or one this command wrote before (replaced), never anything else."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file; give a folder")
    if out.is_dir() and any(out.iterdir()):
        if not (out / kind.package / "manifest.json").is_file():
            raise UserError(f"--out {out} is not empty and holds no earlier {kind.package} export; "
                            "give a new or empty folder")
        shutil.rmtree(out / kind.package)
    out.mkdir(parents=True, exist_ok=True)


def _pyproject(kind: PackageKind) -> str:
    name = kind.package.replace("_", "-")
    return (f'[build-system]\nrequires = ["setuptools>=70.1"]\nbuild-backend = "setuptools.build_meta"\n\n'
            f'[project]\nname = "{name}"\nversion = "0.1.0"\ndescription = "{kind.summary}"\n'
            f'requires-python = ">=3.10"\ndependencies = ["torch", "triton"]\n\n'
            f'{kind.entry_points}\n'
            f'[tool.setuptools]\npackages = ["{kind.package}", "{kind.package}.kernels"]\n\n'
            f'[tool.setuptools.package-data]\n{kind.package} = ["manifest.json", "moe_configs/*.json"]\n')
