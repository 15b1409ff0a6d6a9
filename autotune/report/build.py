"""Building the report's files from the tables (data.py) and figures (plots.py); see __init__.py."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path

import jinja2
import pandas as pd

from autotune import text
from autotune.report import data, plots

TEMPLATES = Path(__file__).resolve().parent / "templates"


@dataclasses.dataclass(frozen=True)
class Figure:
    name: str  # file stem: <name>.png
    title: str
    png: bytes | None  # None: nothing to show, and `why` says so in one line where the figure would be
    why: str = ""

    @property
    def data_uri(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.png or b"").decode()


@dataclasses.dataclass(frozen=True)
class Written:
    out: Path
    html: Path
    markdown: Path
    csvs: tuple[Path, ...]
    pngs: tuple[Path, ...]


def tables(runs: data.Runs) -> dict[str, pd.DataFrame]:
    return {"proposals": data.proposals(runs), "settings": data.settings_table(runs),
            "candidates": data.candidates(runs), "progress": data.progress(runs),
            "statuses_per_turn": data.statuses_per_turn(runs), "costs": data.costs(runs),
            "cache_per_turn": data.cache_per_turn(runs), "engine_serving": data.engine_serving(runs)}


def figures(t: dict[str, pd.DataFrame], environments: list[str]) -> list[Figure]:
    """The figures with something to show drawn; each of the others is one line that says why it is not."""
    p, g = t["progress"], t["proposals"]
    no_speedup = "not drawn: no speedup was measured (no GPU; candidates were judged for correctness only)"
    specs = [
        ("best_vs_candidates", "Best speedup so far vs candidates tried", p["speedup"].notna().any(), no_speedup,
         lambda: plots.best_so_far(p, "tried", environments)),
        ("best_vs_dollars", "Best speedup so far vs dollars spent", p["speedup"].notna().any(), no_speedup,
         lambda: plots.best_so_far(p, "dollars", environments)),
        ("statuses_per_turn", "Verdicts per turn", not t["statuses_per_turn"].empty,
         "not drawn: no candidate was judged", lambda: plots.statuses(t["statuses_per_turn"], environments)),
        ("cost_per_kernel", "Tokens per kernel and share spent on failures",
         not t["costs"].empty and t["costs"]["tokens"].sum() > 0,
         "not drawn: no LLM tokens were spent (agent=search writes its candidates from templates)",
         lambda: plots.cost_per_kernel(t["costs"], environments)),
        ("cache_per_turn", "Prompt-cache hit rate per turn", not t["cache_per_turn"].empty,
         "not drawn: no LLM request reported its cached prompt tokens",
         lambda: plots.cache_rate(t["cache_per_turn"], environments)),
        ("gains", "End-to-end gain per proposal: projected from the measured speedup, and measured",
         g[["projected_gain", "measured_gain"]].notna().any().any(),
         "not drawn: no proposal has a measured speedup or a measured end-to-end gain (both need a GPU)",
         lambda: plots.gains(g, environments)),
    ]
    return [Figure(name, title, draw()) if shown else Figure(name, title, None, why)
            for name, title, shown, why, draw in specs]


def build(paths: list[str | Path], out: str | Path | None = None) -> Written:
    runs = data.load(paths)
    out = Path(out or paths[0])
    out.mkdir(parents=True, exist_ok=True)
    t = tables(runs)
    environments = list(runs.runs["environment"])
    figs = figures(t, environments)
    csvs = tuple(_csv(df, out / f"{name}.csv") for name, df in t.items())
    pngs = tuple(_write(out / f"{f.name}.png", f.png) for f in figs if f.png is not None)
    context = {"runs": runs.runs, "tables": t, "figures": figs, "environments": sorted(set(environments)),
               "measured": bool(t["candidates"]["speedup"].notna().any()), "cache_goal": plots.CACHE_GOAL}
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                             autoescape=jinja2.select_autoescape(["html"]))
    env.filters["html_table"] = lambda df: _fmt(df).to_html(index=df.index.name is not None, border=0, na_rep="-",
                                                            render_links=True)
    env.filters["md_table"] = md_table
    html = _write(out / "report.html", env.get_template("report.html.j2").render(**context).encode())
    md = _write(out / "report.md", env.get_template("report.md.j2").render(**context).encode())
    return Written(out, html, md, csvs, pngs)


PERCENT = ("share", "gain", "hit_rate")  # columns that are fractions: shown as percentages (the CSVs keep fractions)


def _fmt(df: pd.DataFrame) -> pd.DataFrame:
    """For reading (the CSVs keep every digit): fractions as percentages, rounded once (text.pct); other floats to
    4 significant digits; a speedup nobody measured says so; other NaN stays '-'."""
    def column(col: pd.Series) -> pd.Series:
        name = str(col.name)
        if name.endswith(PERCENT):
            return col.map(lambda v: text.pct(v) if isinstance(v, float) else v)
        if name == "speedup":
            return col.map(lambda v: f"{v:.2f}x" if isinstance(v, float) and v == v else "not measured")
        return col.map(lambda v: f"{v:.4g}" if isinstance(v, float) and v == v else "-" if v is None else v)
    return df.apply(column)


def md_table(df: pd.DataFrame) -> str:
    """A GitHub markdown table (pandas' to_markdown would need tabulate for this one use)."""
    if df.empty:
        return "(none)"
    df = _fmt(df.reset_index() if df.index.name is not None else df)
    cell = lambda v: "-" if v is None or (isinstance(v, float) and v != v) else str(v).replace("|", "\\|")
    head = "| " + " | ".join(map(str, df.columns)) + " |\n|" + " --- |" * len(df.columns)
    return head + "".join("\n| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False))


def _csv(df: pd.DataFrame, path: Path) -> Path:
    df.to_csv(path, index=df.index.name is not None)
    return path


def _write(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    return path
