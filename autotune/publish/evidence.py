"""The files of a proposal: the evidence page (markdown, also the PR body), provenance.json and a regression test.

The evidence page is rendered from templates/evidence.md.j2 and is written for a reviewer who decides from
it alone: a summary table first (verdict, correctness, speed, share of serving time, projected gain, the
model-level check, who made it and at what cost), then the detail behind each line. It ends with a hidden
HTML comment holding machine-readable metadata (`parse_metadata` reads it back).
"""

from __future__ import annotations

import collections
import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
from omegaconf import OmegaConf

from autotune.env import Environment
from autotune.records import ProfiledShape, amdahl_gain
from autotune.text import fence
from autotune.verify.verdict import INVISIBLE, Verdict

if TYPE_CHECKING:
    from autotune.publish.types import ProposalRequest

TEMPLATES = Path(__file__).resolve().parent / "templates"
REGRESSION_SHAPES = 4  # profile shapes a generated regression test re-checks
HOTSPOT_ROWS = 12  # profile shapes listed on the evidence page (the rest are summed up in one line)
_META = re.compile(r"<!-- autotune-proposal: (\{.*?\}) -->")
# a folded section: the case table (checker text, cells escaped), or the source up to its own closing fence (longer
# than any run of backticks in the source, so nothing in it ends the match early)
_FOLDED = re.compile(r"<details><summary>(Every shape[^<]*)</summary>.*?</details>"
                     r"|<details><summary>(Kernel source)</summary>\n\n(`{3,})python\n.*?\n\3\n</details>", re.DOTALL)
_CONTROL = re.compile(f"[\r\x0c{INVISIBLE}]")  # a tab stays; line breaks are spaces by then
CELL_CHARS = 600  # the most of any one text a table cell shows


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, autoescape=False)
    env.filters.update(us=_us, num=_num, err=_err, pct=_pct, cell=_cell, fence=fence,
                       pct100=lambda x: "—" if x is None else f"{x:.0f}%",
                       times=lambda x: "—" if x is None else f"{x:.2f}×",
                       shape=lambda s: "×".join(str(d) for d in s))
    return env


def _us(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:,.0f}"


def _num(x: Any) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"
    return str(x)


def _err(x: float | None) -> str:
    if x is None:
        return "—"
    return "0" if x == 0 else "nan" if math.isnan(x) else f"{x:.1e}"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _cell(x: Any) -> str:
    """Text that stays inside one markdown table cell and is never markup: no control or direction characters, HTML
    as entities, no pipe or line break, at most CELL_CHARS characters (the checker's reasons quote candidate text)."""
    text = _CONTROL.sub("", str(x).replace("\n", " "))
    text = text if len(text) <= CELL_CHARS else text[:CELL_CHARS] + " …"
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def _worst(errors) -> float | None:
    """The largest error, ignoring unknown ones (None, NaN); None when there is none."""
    known = [e for e in errors if e is not None and not math.isnan(e)]
    return max(known) if known else None


def case_rows(verdict: Verdict) -> list[dict[str, Any]]:
    """One row per shape x dtype x kind, over its seeds: worst errors, tolerance, cases passed."""
    groups: dict[tuple, list] = collections.OrderedDict()
    for c in verdict.cases:
        groups.setdefault((tuple(c.shape), c.dtype, c.kind), []).append(c)
    rows = []
    for (shape, dtype, kind), cases in groups.items():
        notes = sorted({c.note for c in cases if c.note})
        rows.append({"shape": shape, "dtype": dtype, "kind": kind, "source": cases[0].source,
                     "max_abs_err": _worst(c.max_abs_err for c in cases),
                     "max_rel_err": _worst(c.max_rel_err for c in cases),
                     "rtol": cases[0].rtol, "atol": cases[0].atol, "seeds": len(cases),
                     "passed": sum(c.passed for c in cases), "note": "; ".join(notes)})
    return rows


def regression_shapes(request: ProposalRequest) -> list[ProfiledShape]:
    """The shapes of the generated regression test: the profile's most-called shapes (the checker
    adds its own edge shapes and runs each shape in every dtype). Capped, because on CPU each profile shape
    costs about 1.5 s under the interpreter (measured: 4 shapes x 3 dtypes + edges, 64 cases, 13 s)."""
    found = list(request.hotspot.shapes) if request.hotspot else []
    if not found:  # no profile attached: the non-edge shapes the verdict was judged on
        seen: dict[tuple, str] = {}
        for c in request.verdict.cases:
            if c.source != "edge":
                seen.setdefault(tuple(c.shape), c.dtype)
        found = [ProfiledShape(shape, dtype, 0) for shape, dtype in seen.items()]
    return sorted(found, key=lambda s: -s.calls)[:REGRESSION_SHAPES]


def _hotspot(request: ProposalRequest) -> dict[str, Any] | None:
    """The hot spot as the page reads it, its shapes cut to HOTSPOT_ROWS and the rest summed up."""
    if not request.hotspot:
        return None
    page = request.hotspot.to_dict()
    rest = page["shapes"][HOTSPOT_ROWS:]
    more = {"count": len(rest), "calls": sum(s["calls"] for s in rest), "total_us": sum(s["total_us"] for s in rest)}
    return {**page, "shapes": page["shapes"][:HOTSPOT_ROWS], "more": more if rest else None}


def dtype_rows(verdict: Verdict) -> list[dict[str, Any]]:
    """Per dtype: cases passed, the worst errors, the tolerance."""
    rows: dict[str, dict[str, Any]] = {}
    for c in verdict.cases:
        r = rows.setdefault(c.dtype, {"dtype": c.dtype, "passed": 0, "total": 0, "max_abs_err": None,
                                      "max_rel_err": None, "rtol": c.rtol, "atol": c.atol})
        r["passed"], r["total"] = r["passed"] + c.passed, r["total"] + 1
        for key in ("max_abs_err", "max_rel_err"):
            value = getattr(c, key)
            if value is not None and not math.isnan(value) and (r[key] is None or value > r[key]):
                r[key] = value
    return list(rows.values())


def _latency_rows(model_check: dict[str, Any] | None) -> list[dict[str, Any]]:
    latency = (model_check or {}).get("latency") or {}
    before, after = latency.get("before") or {}, latency.get("after") or {}
    rows = []
    for name in before:
        b, a = before.get(name), after.get(name)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b:
            change = f"{100 * (a - b) / b:+.1f}%"
        else:
            change = "—"
        rows.append({"name": name, "before": b, "after": a, "change": change})
    return rows


def _model_sentence(mc: dict[str, Any] | None) -> str:
    if not mc:
        return "not run"
    prompts, new = mc.get("prompts", "?"), mc.get("new_tokens", "?")
    diff = f"max logit difference {_err(mc.get('max_logit_diff'))}"
    if mc.get("logit_tolerance") is not None:
        diff += f" (tolerance {_err(mc['logit_tolerance'])})"
    served = f" The kernel served {mc['kernel_calls']:,} of the model's {mc['reference_calls']:,} calls to it." \
        if mc.get("reference_calls") else " How many calls the kernel served was not recorded."
    if mc.get("tokens_identical"):
        return (f"Greedy tokens identical to the reference model's on {prompts} prompts × {new} new tokens; "
                f"{diff}.{served}")
    return f"⚠ Greedy tokens DIFFER from the reference model's on {prompts} prompts × {new} new tokens; {diff}.{served}"


def _profile_lines(request: ProposalRequest) -> dict[str, str]:
    hs, v, t = request.hotspot, request.verdict, request.target
    if not hs:
        return {"profile_line": "unknown (no profile)", "gain_line": "unknown (no profile)", "gain_sentence": ""}
    share = hs.share
    if v.measured and v.speedup_geomean:
        gain = _pct(amdahl_gain(share, v.speedup_geomean))
        line = f"**{gain}** of serving time at the measured {v.speedup_geomean:.2f}×"
        sentence = f"At the measured {v.speedup_geomean:.2f}×, serving takes {gain} less time end to end"
    else:  # no number from a speed nobody measured; the share itself bounds any gain
        line = (f"not projected: this kernel's speed is not measured (no GPU); at most {_pct(share)}, the whole share "
                f"of `{t}`")
        sentence = (f"No gain is projected: this kernel's own speed is not measured (no GPU); no kernel of `{t}` can "
                    f"save more than its {_pct(share)}")
    return {"profile_line": f"{_pct(share)} ({hs.calls} calls)", "gain_line": line,
            "gain_sentence": sentence + ". Amdahl: gain = 1 − ((1 − share) + share / speedup)."}


def _headline(v: Verdict) -> str:
    if v.measured and v.speedup_geomean:
        return f"{v.speedup_geomean:.2f}× faster than the best baseline"
    return "correct, speed not measured (no GPU)" if v.status.correct else v.status.value


def _lead(request: ProposalRequest) -> str:
    c = request.candidate
    who = f"the `{c.get('agent') or '?'}` agent" + (f" (model `{c['model']}`)" if c.get("model") else "")
    return (f"A Triton kernel for `{request.target}`, written by {who} in run `{request.run_id}` and judged by the "
            f"checker in an isolated process.")


CONTRIBUTION = (  # publish.contribution's fields: what vLLM's AGENTS.md and transformers ask of an AI-assisted PR
    ("issue", "Linked issue", "the upstream issue this answers and the maintainers' coordination on it "
                              "(publish.contribution.issue=URL)"),
    ("not_duplicate", "Not a duplicate because", "why no open pull request already does this "
                                                 "(publish.contribution.not_duplicate=TEXT)"),
    ("human_checked", "What a person checked", "what a person checked before submitting "
                                               "(publish.contribution.human_checked=TEXT)"),
)


def contribution_gaps(cfg) -> list[str]:
    """The publish.contribution fields still empty (an upstream PR needs them all)."""
    given = OmegaConf.select(cfg, "publish.contribution", default=None) or {}
    return [f"publish.contribution.{key}" for key, _, _ in CONTRIBUTION if not str(given.get(key) or "").strip()]


def _disclosure(request: ProposalRequest) -> str:
    c = request.candidate
    if c.get("agent") == "search":
        return (f"autotune's search baseline, from a template (no LLM), in run `{request.run_id}`; the tests below "
                f"ran without a person")
    model = f" (model `{c['model']}`)" if c.get("model") else ""
    return (f"an AI agent: the `{c.get('agent') or '?'}` agent{model}, turn {c.get('turn', '?')} of run "
            f"`{request.run_id}`, wrote all of the kernel; the tests below ran without a person")


def render(request: ProposalRequest, *, proposal_id: str, short_id: str, branch: str, base: str, backend: str,
           sha256: str, contribution: Any = None, earlier: Any = ()) -> str:
    """The evidence page; `contribution`: publish.contribution (the fields an AI-assisted PR must fill); `earlier`:
    the runs that found this same kernel before (each {"id", "at", "candidate", "page"}), whose pages stay beside."""
    v = request.verdict
    rows = case_rows(v)
    passed, total = sum(c.passed for c in v.cases), len(v.cases)
    env = Environment.from_dict(request.environment) if request.environment else None
    cand = collections.defaultdict(lambda: None, request.candidate)
    context = dict(
        target=request.target, short_id=short_id, proposal_id=proposal_id, branch=branch, base=base, backend=backend,
        run_id=request.run_id, verdict=v, headline=_headline(v), lead=_lead(request), sha256=sha256,
        source=request.source.rstrip(),
        cases={"rows": rows, "passed": passed, "total": total, "not_evidence": sum(not c.evidence for c in v.cases),
               "by_dtype": dtype_rows(v)},
        timings=v.timings if v.measured else [], speed_line=_speed_line(v), candidate=cand,
        tokens_line=_tokens_line(cand), cost_line=_cost_line(cand), hotspot=_hotspot(request),
        model_check=request.model_check,
        model_line=_model_sentence(request.model_check) if request.model_check else "not run",
        model_sentence=_model_sentence(request.model_check), latency_rows=_latency_rows(request.model_check),
        engine_bench=request.engine_bench, disclosure=_disclosure(request), earlier=list(earlier),
        contribution=[(label, str((contribution or {}).get(key) or "").strip(), hint)
                      for key, label, hint in CONTRIBUTION],
        environment=request.environment or {}, environment_summary=env.summary() if env else "not recorded",
        environment_rows=[(k, val) for k, val in (request.environment or {}).items()],
        metadata=json.dumps({"proposal": proposal_id, "run": request.run_id, "target": request.target, "sha256": sha256,
                             "status": v.status.value}),
        **_profile_lines(request))
    return _env().get_template("evidence.md.j2").render(**context)


def title(request: ProposalRequest, proposal_id: str) -> str:
    """The pull request's title, e.g. "rms_norm: Triton kernel rms_norm-1a2b3c, 1.42× faster"."""
    return f"{request.target}: Triton kernel {proposal_id}, {_headline(request.verdict)}"


def _speed_line(v: Verdict) -> str:
    if v.measured and v.speedup_geomean:
        return f"**{v.speedup_geomean:.2f}×** (geometric mean over {len(v.timings)} shapes, weighted by calls)"
    return "not measured (no GPU)"


def _tokens_line(cand) -> str:
    if not cand["prompt_tokens"] and not cand["completion_tokens"]:
        return "no LLM tokens"
    return (f"{cand['prompt_tokens'] or 0:,} prompt tokens ({cand['cached_tokens'] or 0:,} cached), "
            f"{cand['completion_tokens'] or 0:,} completion tokens")


def _cost_line(cand) -> str:
    """What the kernel cost: this turn's dollars and all of its target's LLM requests in the run (the failed attempts
    too: `spent` in the candidate); unset prices (tokens at $0) say so instead of printing $0.0000."""
    spent = cand["spent"] or {}
    tokens = spent.get("tokens", (cand["prompt_tokens"] or 0) + (cand["completion_tokens"] or 0))
    if not tokens:
        return "no cost"
    dollars = spent.get("cost_usd", cand["cost_usd"] or 0.0)
    if not dollars:
        return "dollars not counted (agent.price is not set)"
    line = f"${cand['cost_usd'] or 0.0:.4f} this turn"
    if spent:
        line += (f"; the kernel cost ${dollars:.4f} in all ({spent.get('requests', 0)} requests, "
                 f"{tokens:,} tokens, failed attempts included)")
    return line


def fit(markdown: str, limit: int) -> str:
    """The page within `limit` characters (GitHub refuses longer PR bodies): the folded sections go first,
    replaced by a pointer to EVIDENCE.md on the branch, which keeps the whole page."""
    if len(markdown) <= limit:
        return markdown
    short = _FOLDED.sub(lambda m: f"<details><summary>{m.group(1) or m.group(2)}</summary>\n\nToo long for a pull "
                                  "request body: see EVIDENCE.md on the branch.\n</details>", markdown)
    if len(short) <= limit:
        return short
    meta = _META.findall(markdown)
    tail = ("\n\n(cut here: the whole page is EVIDENCE.md on the branch)\n\n"
            + (f"<!-- autotune-proposal: {meta[-1]} -->" if meta else ""))
    return short[: limit - len(tail)] + tail


def parse_metadata(markdown: str) -> dict[str, Any] | None:
    """The hidden metadata of an evidence page (proposal, run, target, sha256, status), or None."""
    found = _META.findall(markdown or "")  # the page's own is its last line: one quoted in the source comes before
    return json.loads(found[-1]) if found else None


def provenance(request: ProposalRequest, *, proposal_id: str, sha256: str, created_at: str) -> dict[str, Any]:
    v = request.verdict
    return {
        "proposal": proposal_id, "target": request.target, "sha256": sha256, "created_at": created_at,
        "run": {"id": request.run_id, "dir": request.run_dir},
        "candidate": dict(request.candidate),
        "verdict": {"status": v.status.value, "reason": v.reason, "measured": v.measured,
                    "speedup_geomean": v.speedup_geomean, "cases_passed": sum(c.passed for c in v.cases),
                    "cases_total": len(v.cases), "nondeterministic": v.nondeterministic, "policy": list(v.policy),
                    "timings": [t.__dict__ for t in v.timings]},
        "hotspot": request.hotspot.to_dict() if request.hotspot else None, "model_check": request.model_check,
        "environment": request.environment,
    }


def regression_test(request: ProposalRequest, *, proposal_id: str, short_id: str) -> str:
    shapes = [(s.shape, s.dtype, s.calls) for s in regression_shapes(request)]
    dtypes = sorted({c.dtype for c in request.verdict.cases} | {d for _, d, _ in shapes})
    return _env().get_template("regression_test.py.j2").render(
        target=request.target, short_id=short_id, proposal_id=proposal_id, run_id=request.run_id,
        shapes=shapes, dtypes=dtypes)
