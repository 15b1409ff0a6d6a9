"""The selfcheck's page (`<stem>.md`) and raw figures (`<stem>.json`), rewritten after every section.

The page has one heading per section, always in the same order, each saying `ok`, `FAILED (why)`,
`done` (figures only) or `not run`; times are microseconds unless a column says otherwise, and every
figure on a dry run that would need a GPU reads "not measured", or is a CPU stand-in's and says so.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from autotune.selfcheck import SECTIONS

TITLES = {"roofline": "1. Memory-bandwidth roofline", "profile": "2. Profile of the served model",
          "verify": "3. The checker on every example and cheating kernel", "run": "4. The whole loop",
          "protocol": "5. The timing protocol"}


def write(stem: Path, header: dict, results: list) -> None:
    by_name = {r.name: r for r in results}
    stem.with_suffix(".json").write_text(json.dumps(
        {"header": header, "sections": [dataclasses.asdict(r) for r in results]}, indent=1, default=str))
    lines = [f"# autotune selfcheck: {header['gpu']} ({header['mode']})", "",
             f"environment: {_environment(header['environment'])}", ""]
    for name in SECTIONS:
        r = by_name.get(name)
        state = "not run" if r is None else {True: "ok", False: f"FAILED ({r.error or 'see below'})",
                                             None: "done"}[r.ok]
        lines += [f"## {TITLES[name]}: {state}" + (f" ({r.seconds:.0f} s)" if r else ""), ""]
        if r is not None and r.data:
            lines += globals()[f"_{name}"](r.data) + [""]
    stem.with_suffix(".md").write_text("\n".join(lines))


def _environment(e: dict) -> str:
    keys = ("gpu", "driver", "cuda", "torch", "triton", "python", "project_commit")
    return ", ".join(f"{k} {e.get(k) or '-'}" for k in keys)


def _num(x, fmt: str = ".1f") -> str:
    return "not measured" if x is None else format(x, fmt)


def _table(head: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + \
        ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def _roofline(d: dict) -> list[str]:
    where = d["gpu"] or "host CPU (dry run, CPU stand-in: not a GPU figure)"
    return [f"{d['bytes'] / 2**30:.2f} GiB of fp32 random data on {where}:", ""] + _table(
        ["measure", "GB/s", "datasheet GB/s"],
        [["device-to-device copy (read + write)", _num(d["copy_gbps"]), d["datasheet_gbps"] or "-"],
         ["read-reduce (sum)", _num(d["reduce_gbps"]), d["datasheet_gbps"] or "-"]])


def _profile(d: dict) -> list[str]:
    if "error" in d:
        return [f"error: {d['error']}"]
    lat = lambda k, p: _num(d[k].get(p), ".2f")
    lines = [f"model {d['model']}, {d['requests']} requests: TTFT p50/p95 {lat('ttft_ms', 'p50')}/"
             f"{lat('ttft_ms', 'p95')} ms, TPOT p50/p95 {lat('tpot_ms', 'p50')}/{lat('tpot_ms', 'p95')} ms, "
             f"{d['output_tokens_per_s']:.0f} output tokens/s (under the profiler)", ""]
    lines += _table(["target", "share", "calls", "total ms", "CUDA kernel ms"],
                    [[h["target"], f"{100 * h['share']:.1f}%", h["calls"], _num(h["total_us"] / 1e3, ".2f"),
                      _num(h["device_us"] / 1e3 if h.get("device_us") else None, ".2f")] for h in d["hotspots"]])
    nsight = d.get("nsight")
    lines += ["", f"nsight: {json.dumps(nsight)[:2000]}" if nsight else f"nsight: {d.get('nsight_note') or 'none'}"]
    return lines


def _verify(d: dict) -> list[str]:
    rows = [[c["file"], c["target"], c["expected"], c["status"], "yes" if c["as_expected"] else "**NO**",
             _num(c.get("speedup_geomean"), ".3f"), c["reason"][:120].replace("|", "/")] for c in d["candidates"]]
    lines = _table(["candidate", "target", "expected", "got", "as expected", "speedup", "reason"], rows)
    timed = [(c, t) for c in d["candidates"] for t in c.get("timings", [])]
    if timed:
        lines += ["", "Per shape (us; fraction: ideal bytes / time over the measured copy bandwidth):", ""]
        lines += _table(["candidate", "shape", "dtype", "calls", "kernel", "eager", "compile", "speedup",
                         "fraction of roofline"],
                        [[c["file"].rsplit("/", 1)[-1], "x".join(map(str, t["shape"])), t["dtype"], t["calls"],
                          _num(t["candidate_us"], ".2f"), _num(t["eager_us"], ".2f"), _num(t["compile_us"], ".2f"),
                          _num(t["speedup"], ".2f"), _num(t.get("fraction_of_roofline"), ".0%")] for c, t in timed])
    lines += _stand_in_table([c for c in d["candidates"] if c.get("stand_in")])
    libs = d.get("libraries") or []
    if libs:
        stand_in = any(r.get("stand_in") for r in libs)
        lines += ["", "Against Liger-Kernel (bf16, medians in us" +
                  ("; CPU stand-in: interpreter and host clock, not a GPU's):" if stand_in else ", do_bench):"), ""]
        lines += _table(["target", "shape", "eager", "ours", "liger", "agree with reference", "note"],
                        [[r.get("target", "-"), "x".join(map(str, r.get("shape", []))) or "-",
                          _num(r.get("eager_us"), ".2f"), _num(r.get("ours_us"), ".2f"), _num(r.get("liger_us"), ".2f"),
                          r.get("agrees_with_reference", "-"), r.get("note", "")] for r in libs])
    if d.get("not_run"):
        lines += ["", f"not in any test table, not run: {', '.join(d['not_run'])}"]
    return lines


def _stand_in_table(rows: list[dict]) -> list[str]:
    """The timing protocol run on the CPU stand-in: its figures, labelled, and the status they left (unmeasured)."""
    if not rows:
        return []
    lines = ["", "The timing protocol on the CPU stand-in (both bench processes, baselines, statistics, re-check; "
             "interpreter times on a host clock, **not a GPU's figures and never a speed**):", ""]
    return lines + _table(
        ["candidate", "device", "shape", "dtype", "kernel (stand-in)", "eager (stand-in)", "compile (stand-in)",
         "not timed", "status", "as expected"],
        [[c["file"].rsplit("/", 1)[-1], c["stand_in"]["device"], "x".join(map(str, t["shape"])), t["dtype"],
          _num(t["candidate_us"], ".0f"), _num(t["eager_us"], ".1f"), _num(t["compile_us"], ".1f"),
          "; ".join(f"{k}: {v}" for k, v in c["stand_in"]["absent"].items())[:100].replace("|", "/") or "-",
          c["stand_in"]["status"], "yes" if c["stand_in"]["as_expected"] else "**NO**"]
         for c in rows for t in c["stand_in"]["timings"] or [{"shape": [], "dtype": "-", "candidate_us": None,
                                                              "eager_us": None, "compile_us": None}]])


def _run(d: dict) -> list[str]:
    if "error" in d:
        return [f"error: {d['error']}"]
    lines = _table(["target", "outcome", "best verdict", "detail"],
                   [[o["target"], o["status"], o["verdict"] or "-", str(o["detail"])[:120]] for o in d["outcomes"]])
    for c in d["model_checks"]:
        lat = c.get("latency") or {}
        before, after = lat.get("before") or {}, lat.get("after") or {}
        lines += ["", f"model check {c['target']}: {'passed' if c['passed'] else 'FAILED'}; latency before -> after: "
                  + (", ".join(f"{k} {_num(before.get(k), '.2f')} -> {_num(after.get(k), '.2f')}" for k in before)
                     or "not measured (no GPU)")]
    return lines


def _protocol(d: dict) -> list[str]:
    return _table(["kernel", "expected", "got", "as expected", "reason"],
                  [[c["file"].rsplit("/", 1)[-1], c["expected"], c["status"], "yes" if c["as_expected"] else "**NO**",
                    c["reason"][:160].replace("|", "/")] for c in d["checks"]]) + \
        _stand_in_table([c for c in d["checks"] if c.get("stand_in")])
