"""The report's figures (matplotlib, Agg backend: no display needed), each returned as PNG bytes.

Every figure carries the environment it came from in its footer (GPU, driver, torch, triton, commit). A figure
with nothing to show is not drawn (build.figures says why in one line instead); within one that is, a quantity not
measured (a run without timings, a proposal without a measured gain) is said in words, never drawn as a zero.
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import MaxNLocator

CACHE_GOAL = 0.85  # of prompt tokens served from the prefix cache, from turn 2 on


def _figure(title: str):
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=100)
    ax.set_title(title, fontsize=11)
    return fig, ax


def _png(fig, environments: list[str]) -> bytes:
    fig.text(0.01, 0.01, "environment: " + " | ".join(sorted(set(environments))), fontsize=7, color="#555",
             wrap=True)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _label(run: str, target: str, agent: str) -> str:
    return f"{target} / {agent} ({Path(run).name})"


def best_so_far(p: pd.DataFrame, x: str, environments: list[str]) -> bytes:
    """Best measured speedup so far against candidates tried (x="tried") or dollars spent (x="dollars")."""
    xlabel = {"tried": "candidates tried", "dollars": "dollars spent (USD)"}[x]
    fig, ax = _figure(f"best speedup so far vs {xlabel}, per target and agent")
    for (run, target, agent), g in p.groupby(["run", "target", "agent"], sort=False):
        if g["best_so_far"].notna().any():  # a run without timings has no line (the text below says so)
            ax.step(g[x], g["best_so_far"], where="post", marker="o", label=_label(run, target, agent))
    unmeasured = p.groupby("run")["speedup"].apply(lambda s: s.isna().all())
    if unmeasured.any():
        ax.text(0.01, 0.98, f"not measured (no GPU): {int(unmeasured.sum())} run(s), not drawn", fontsize=8,
                color="#a33", transform=ax.transAxes, va="top")
    if x == "tried":
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.axhline(1.0, color="#888", lw=0.8, ls="--")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("best speedup so far (x)")
    ax.legend(fontsize=7)
    return _png(fig, environments)


def statuses(t: pd.DataFrame, environments: list[str]) -> bytes:
    fig, ax = _figure("how candidates end, per turn")
    t.plot.bar(stacked=True, ax=ax, rot=0)
    ax.set_xlabel("turn")
    ax.set_ylabel("candidates")
    ax.legend(fontsize=8, title="verdict")
    return _png(fig, environments)


def cost_per_kernel(c: pd.DataFrame, environments: list[str]) -> bytes:
    fig, ax = _figure("tokens per kernel, and the shares spent on failed attempts and on retries, per run")
    labels = [Path(r).name for r in c["run"]]
    ax.bar(labels, c["tokens_per_kernel"].fillna(0), color="#4a7")
    ax.set_ylabel("tokens per kernel (" + ", ".join(sorted(set(c["per_kernel_basis"]))) + ")")
    twin = ax.twinx()
    twin.plot(labels, c["failed_token_share"], "o-", color="#c44", label="failed attempts")
    twin.plot(labels, c["retry_token_share"], "s--", color="#a6c", label="retries (turn 2 on)")
    twin.set_ylim(0, 1)
    twin.set_ylabel("share of tokens", color="#c44")
    twin.legend(fontsize=8, loc="upper right")
    ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    return _png(fig, environments)


def cache_rate(g: pd.DataFrame, environments: list[str]) -> bytes:
    fig, ax = _figure("prompt-cache hit rate per turn (goal: >= 85% from turn 2)")
    ax.bar(g["turn"].astype(str), g["hit_rate"], color="#47a")
    ax.axhline(CACHE_GOAL, color="#c44", ls="--", label="goal 85%")
    ax.set_ylim(0, 1)
    ax.set_xlabel("turn")
    ax.set_ylabel("cached / prompt tokens")
    ax.legend(fontsize=8)
    return _png(fig, environments)


def gains(g: pd.DataFrame, environments: list[str]) -> bytes:
    """Per proposal (autotune.report.data.proposals): the gain projected from its measured speedup and the
    measured one; either not measured is said under its bar's place."""
    fig, ax = _figure("end-to-end gain per proposal: projected from the measured speedup, and measured")
    labels = [f"{p}\n({Path(r).name})" for p, r in zip(g["proposal"], g["run"])]
    xs = range(len(labels))
    for offset, column, label, color in ((-0.2, "projected_gain", "projected", "#888"),
                                         (0.2, "measured_gain", "measured", "#4a7")):
        values = g[column]
        ax.bar([x + offset for x in xs], values.fillna(0) * 100, width=0.4, label=label, color=color)
        for x, v in zip(xs, values):
            if v != v:  # NaN: say it, do not draw a zero
                ax.text(x + offset, 0, "not\nmeasured", ha="center", va="bottom", fontsize=7, color="#a33")
    ax.set_xticks(list(xs), labels, fontsize=7, rotation=30, ha="right")
    ax.set_ylabel("serving time saved (%)")
    ax.legend(fontsize=8)
    return _png(fig, environments)
