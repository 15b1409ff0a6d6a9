"""Building the report's files from the tables (data.py) and figures (plots.py); see __init__.py."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path

import jinja2
import pandas as pd

from autotune.report import data, plots

TEMPLATES = Path(__file__).resolve().parent / "templates"


@dataclasses.dataclass(frozen=True)
class Figure:
    name: str  # file stem: <name>.png
    title: str
    png: bytes

    @property
    def data_uri(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.png).decode()


@dataclasses.dataclass(frozen=True)
class Written:
    out: Path
    html: Path
    markdown: Path
    csvs: tuple[Path, ...]
    pngs: tuple[Path, ...]


def tables(runs: data.Runs) -> dict[str, pd.DataFrame]:
    return {"settings": data.settings_table(runs), "candidates": data.candidates(runs),
            "progress": data.progress(runs), "statuses_per_turn": data.statuses_per_turn(runs),
            "costs": data.costs(runs), "cache_per_turn": data.cache_per_turn(runs), "gains": data.gains(runs),
            "engine_serving": data.engine_serving(runs)}


def figures(t: dict[str, pd.DataFrame], environments: list[str]) -> list[Figure]:
    return [
        Figure("best_vs_candidates", "Best speedup so far vs candidates tried",
               plots.best_so_far(t["progress"], "tried", environments)),
        Figure("best_vs_dollars", "Best speedup so far vs dollars spent",
               plots.best_so_far(t["progress"], "dollars", environments)),
        Figure("statuses_per_turn", "Verdicts per turn", plots.statuses(t["statuses_per_turn"], environments)),
        Figure("cost_per_kernel", "Tokens per kernel and share spent on failures",
               plots.cost_per_kernel(t["costs"], environments)),
        Figure("cache_per_turn", "Prompt-cache hit rate per turn", plots.cache_rate(t["cache_per_turn"], environments)),
        Figure("gains", "Projected and measured end-to-end gain per proposal", plots.gains(t["gains"], environments)),
    ]


def build(paths: list[str | Path], out: str | Path | None = None) -> Written:
    runs = data.load(paths)
    out = Path(out or paths[0])
    out.mkdir(parents=True, exist_ok=True)
    t = tables(runs)
    environments = list(runs.runs["environment"])
    figs = figures(t, environments)
    csvs = tuple(_csv(df, out / f"{name}.csv") for name, df in t.items())
    pngs = tuple(_write(out / f"{f.name}.png", f.png) for f in figs)
    context = {"runs": runs.runs, "tables": t, "figures": figs, "environments": sorted(set(environments)),
               "measured": bool(t["candidates"]["speedup"].notna().any()), "cache_goal": plots.CACHE_GOAL}
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                             autoescape=jinja2.select_autoescape(["html"]))
    env.filters["html_table"] = lambda df: _fmt(df).to_html(index=df.index.name is not None, border=0, na_rep="-")
    env.filters["md_table"] = md_table
    html = _write(out / "report.html", env.get_template("report.html.j2").render(**context).encode())
    md = _write(out / "report.md", env.get_template("report.md.j2").render(**context).encode())
    return Written(out, html, md, csvs, pngs)


def _fmt(df: pd.DataFrame) -> pd.DataFrame:
    """Floats rounded for reading (the CSVs keep every digit); NaN stays '-' (not measured)."""
    return df.apply(lambda col: col.map(lambda v: f"{v:.4g}" if isinstance(v, float) and v == v
                                        else "-" if v is None else v))


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
