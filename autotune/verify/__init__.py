"""The verify stage: judge one candidate kernel file, in isolation, and return a Verdict.

    from autotune.verify import verify
    verdict = verify("rms_norm", "my_kernel.py", cfg.verify)          # or the whole cfg
    verdict.status, verdict.reason                                    # Status.UNMEASURED, "correct on ..."

The checker is carved by process (the README's "What the checker guarantees" has the design and the folder map):
judge/ (this process), plan/, host/ and device/ (the sandboxed worker's two processes), static/, interp/, and
protocol/ for every frame between them. Importing this package imports nothing heavy: the worker imports parts
of it and must not pull in the judge.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

WORKER = "autotune.verify.worker"  # the sandboxed worker's module


def start_worker(device: str = "auto") -> None:
    """Start the worker's fork server now, so that its imports (2-3 s) run beside the caller's own (torch's among
    them); only where the device is surely the CPU (a GPU run's worker must see the GPU: started when needed)."""
    if device == "cpu" or (device == "auto" and not os.path.exists("/dev/nvidiactl")):
        from autotune.sandbox import prewarm

        prewarm(WORKER)


def verify(target, source, cfg_verify, *, shapes=None, environment=None):
    """Judge the candidate `source` (a path, or the source text itself) for `target` (a name or a Target).

    cfg_verify: the `verify` config node, or the whole config (then `device` and `profile.out_dir` are
    taken from it too). shapes: [(shape, dtype name, calls), ...] from the profile; None means
    cfg_verify.shapes ("latest": the newest profile's shapes for this target if there is one, else the
    target's defaults; "default": the defaults). environment: an Environment (or its dict) to record;
    None collects it. Raises UserError for an unknown target or a missing file.
    """
    from autotune.env import collect, resolve_device
    from autotune.targets import get as get_target
    from autotune.verify.judge import judge
    from autotune.verify.static.size import SourceLimits

    t = get_target(target) if isinstance(target, str) else target
    cfg_v, device, out_dir, rows = _settings(cfg_verify)
    path, text, digest = _source(source, SourceLimits.from_config(cfg_v).max_bytes)
    if shapes is None:
        shapes = _configured_shapes(t.name, cfg_v, out_dir)
    env: Any = environment if environment is not None else collect()
    env = env.to_dict() if hasattr(env, "to_dict") else dict(env)
    return judge(t, text, path, cfg_v, shapes=shapes or None, device=resolve_device(device), environment=env,
                 digest=digest, served_rows=rows)


def describe_plan(target, cfg_verify) -> list[str]:
    """The call domain `target` is judged on and the plan covering it on this device, as `verify` would plan it with
    this config (the newest profile's shapes with verify.shapes=latest), with no candidate: `autotune verify TARGET
    --plan`."""
    from autotune import config
    from autotune.env import resolve_device
    from autotune.records import ProfiledShape
    from autotune.targets import get as get_target
    from autotune.verify.plan.config import PlanConfig
    from autotune.verify.plan.domain import describe

    t = get_target(target) if isinstance(target, str) else target
    cfg_v, device, out_dir, rows = _settings(cfg_verify)
    shapes = _configured_shapes(t.name, cfg_v, out_dir)
    plan_config = PlanConfig.from_config(cfg_v, presets=config.chosen_presets(cfg_v.get("models", "all")),
                                         served_rows=rows or 0, whole=resolve_device(device) == "cuda")
    return describe(t, [ProfiledShape.of(s) for s in shapes] if shapes else None, plan_config)


def _configured_shapes(target: str, cfg_v, out_dir: str):
    """verify.shapes: the newest profile's shapes for `target` ("latest"; None without one) or None ("default")."""
    from autotune.errors import UserError

    if str(cfg_v.shapes) == "latest":
        return latest_shapes(target, out_dir)
    if str(cfg_v.shapes) != "default":
        raise UserError(f"verify.shapes must be latest or default, not '{cfg_v.shapes}'")
    return None


def _settings(cfg):
    """(the verify node, device setting, profile out dir, the most tokens a step serves or None) from either the
    whole config or its verify node (then the served rows are conf/config.yaml's)."""
    if "verify" in cfg:
        profile, serve = cfg.get("profile") or {}, cfg.get("serve") or {}
        rows = serve.get("max_batched_tokens")
        return (cfg.verify, str(cfg.get("device", "auto")), str(profile.get("out_dir", "traces")),
                int(rows) if rows is not None else None)
    return cfg, "auto", "traces", None


def _source(source, max_bytes: int) -> tuple[str, str, str | None]:
    """(path shown in the verdict, text, None) for a path or for source text; for a file over `max_bytes`, its
    first max_bytes + 1 bytes and its sha256, read in chunks: a file too large to judge is never held whole."""
    import hashlib

    from autotune.errors import UserError

    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source):
        path = Path(source)
        if not path.is_file():
            raise UserError(f"candidate file '{source}' not found (give the path of a Python file with the kernel)")
        try:
            with path.open("rb") as f:
                head = f.read(max_bytes + 1)
                if len(head) <= max_bytes:
                    return str(path), head.decode("utf-8"), None
                f.seek(0)
                return str(path), head.decode("utf-8", "replace"), hashlib.file_digest(f, "sha256").hexdigest()
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"cannot read candidate file '{source}': {e} (give a readable UTF-8 Python file)") from None
    return "<source>", str(source), None


def latest_shapes(target: str, out_dir: str):
    """The newest profile's shapes for `target`, or None (no profile yet, or the profile stage is absent)."""
    try:
        from autotune.profile import latest_hotspots, shapes_for
    except ImportError:
        return None
    try:
        return shapes_for(target, latest_hotspots(out_dir)) or None
    except (OSError, ValueError, KeyError):
        return None


__all__ = ["verify", "latest_shapes", "describe_plan"]
