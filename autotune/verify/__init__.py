"""The verify stage: judge one candidate kernel file, in isolation, and return a Verdict.

    from autotune.verify import verify
    verdict = verify("rms_norm", "my_kernel.py", cfg.verify)          # or the whole cfg
    verdict.status, verdict.reason                                    # Status.UNMEASURED, "correct on ..."

`autotune verify --help` (autotune/verify/command.py) explains the command; judge.py the order of the
checks; `autotune.sandbox` the isolated runner (`run_isolated`) that other stages reuse. Importing this package
imports nothing heavy: the candidate's worker process imports parts of it and must not pull in the judge.

What the checker guarantees (each point has a test in tests/verify/):
- the verdict is decided by a process that never imports the candidate; references, the fp64 golden
  and every comparison live there; results come back as weights-only tensor frames, never stdout;
- a candidate passes only if every case passes: torch.testing.assert_close's rule at the target's
  per-dtype tolerance (or no less accurate than the reference against fp64), NaN/Inf exactly where the
  reference has them, exact shape and dtype, no aliasing, inputs unchanged, a repeat that agrees and a
  refill that gives the new answer, on the profile's (or default) and edge shapes in fp32/bf16/fp16,
  with realistic, large and NaN/Inf inputs; degenerate cases do not count as evidence;
- its math runs in Triton: a static scan of the source, a launch count and a record of the aten ops
  its Python runs at import and at call time; no file, process, network, FFI or exec tricks in the source;
- the candidate runs in a fresh process (autotune.sandbox): own session, scrubbed environment, private
  directory and caches, time/memory/file/process limits, a seccomp filter (no processes on CPU, no sockets,
  mounts, namespaces or ptrace), and where root: own PID and IPC namespaces (nothing it starts or creates
  outlives the verdict), no network, a root built from nothing (the Python installation, shared libraries
  and its private directory, a size-capped tmpfs), a fresh /proc, an unprivileged uid, not dumpable;
- inside it, an audit hook armed before the import denies files, processes, sockets, ctypes, frames and
  new imports outside an allow-list; modules are frozen and the worker's sealed (autotune.sandbox.audit);
- a passing verdict keeps no stderr; a failing one a bounded tail with secrets masked, in the reason too.
What it does not: the hook is Python-level (reachable objects can still be mutated); on a GPU processes are
allowed (Triton's compile) and /usr and /sys are visible; without root the namespaces, the built root and the
uid drop are skipped (the verdict says so; the seccomp filter still applies);
on CPU shapes are cut for the interpreter and nothing is timed; the GPU timing path has not yet run on
a GPU in this project's tests.
"""

from __future__ import annotations

from pathlib import Path


def verify(target, source, cfg_verify, *, shapes=None, environment=None):
    """Judge the candidate `source` (a path, or the source text itself) for `target` (a name or a Target).

    cfg_verify: the `verify` config node, or the whole config (then `device` and `profile.out_dir` are
    taken from it too). shapes: [(shape, dtype name, calls), ...] from the profile; None means
    cfg_verify.shapes ("latest": the newest profile's shapes for this target if there is one, else the
    target's defaults; "default": the defaults). environment: an Environment (or its dict) to record;
    None collects it. Raises UserError for an unknown target or a missing file.
    """
    from autotune.env import collect, resolve_device
    from autotune.errors import UserError
    from autotune.targets import get as get_target
    from autotune.verify.judge import judge

    t = get_target(target) if isinstance(target, str) else target
    cfg_v, device, out_dir = _settings(cfg_verify)
    path, text = _source(source)
    if shapes is None and str(cfg_v.shapes) == "latest":
        shapes = latest_shapes(t.name, out_dir)
    elif shapes is None and str(cfg_v.shapes) != "default":
        raise UserError(f"verify.shapes must be latest or default, not '{cfg_v.shapes}'")
    env = environment if environment is not None else collect()
    env = env.to_dict() if hasattr(env, "to_dict") else dict(env)
    return judge(t, text, path, cfg_v, shapes=shapes or None, device=resolve_device(device), environment=env)


def _settings(cfg):
    """(the verify node, device setting, profile out dir) from either the whole config or its verify node."""
    if "verify" in cfg:
        profile = cfg.get("profile") or {}
        return cfg.verify, str(cfg.get("device", "auto")), str(profile.get("out_dir", "traces"))
    return cfg, "auto", "traces"


def _source(source) -> tuple[str, str]:
    """(path shown in the verdict, text) for a path or for source text."""
    from autotune.errors import UserError

    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source):
        path = Path(source)
        if not path.is_file():
            raise UserError(f"candidate file '{source}' not found (give the path of a Python file with the kernel)")
        try:
            return str(path), path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"cannot read candidate file '{source}': {e} (give a readable UTF-8 Python file)") from None
    return "<source>", str(source)


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


__all__ = ["verify", "latest_shapes"]
