"""`autotune report` on small ledgers written with the real ledger writer: the numbers in its tables are
the ones the records imply, the figures exist and say where they came from, and report.html opens in a
real headless Chromium with every image loaded.

Two runs stand for a sweep over agent.temperature: run "gpu" has measured speedups (as judged on a GPU),
LLM requests with cached prompt tokens and a proposal with a measured latency; run "cpu" has nothing timed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from autotune.ledger import Ledger
from autotune.report import build

CHROMIUM = Path("/usr/bin/chromium")
GPU_ENV = {"gpu": "NVIDIA H100 80GB HBM3", "driver": "550.54", "torch": "2.13.0", "triton": "3.9.0",
           "project_commit": "0123456789abcdef", "project_dirty": False}
CPU_ENV = {"gpu": None, "driver": None, "torch": "2.13.0+cpu", "triton": "3.9.0",
           "project_commit": "0123456789abcdef", "project_dirty": False}


def verdict(status: str, speedup: float | None) -> dict:
    return {"status": status, "reason": "r", "measured": speedup is not None, "speedup_geomean": speedup}


def make_run(d: Path, *, temperature: float, env: dict, candidates: list[tuple], llm: list[tuple],
             proposal: dict | None = None, latency: dict | None = None) -> Path:
    """candidates: (index, turn, status, speedup); llm: (index, turn, prompt, cached, completion, cost)."""
    d.mkdir(parents=True)
    OmegaConf.save(OmegaConf.create({"run_id": d.name, "targets": ["rms_norm"], "agent": {
        "name": "openai", "model": "qwen-coder", "temperature": temperature, "turns": 2, "candidates": 2}}),
        d / "config.yaml")
    (d / "env.json").write_text(json.dumps(env))
    ledger = Ledger(d / "ledger.jsonl")
    ledger.append("profile", run_dir="profile/p", hotspots=[
        {"target": "rms_norm", "share": 0.2, "calls": 10, "projected_gain": 0.1}])
    for (i, turn, prompt, cached, completion, cost) in llm:
        ledger.append("llm", target="rms_norm", index=i, turn=turn, agent="openai", model="qwen-coder",
                      prompt_tokens=prompt, cached_tokens=cached, cached_known=True, completion_tokens=completion,
                      cost_usd=cost)
    for (i, turn, status, speedup) in candidates:
        ledger.append("candidate", id=f"rms_norm-c{i}-t{turn}", target="rms_norm", agent="openai", index=i,
                      turn=turn, status=status, verdict=verdict(status, speedup))
    if proposal:
        ledger.append("model_check", target="rms_norm", candidate=proposal["candidate"], passed=True,
                      latency=latency)
        ledger.append("proposal", target="rms_norm", **proposal)
    return d


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sweep")
    make_run(root / "0", temperature=0.2, env=GPU_ENV,
             candidates=[(0, 1, "incorrect", None), (1, 1, "accepted", 1.25), (0, 2, "accepted", 1.6),
                         (1, 2, "slower", 0.9)],
             llm=[(0, 1, 1000, 0, 500, 0.010), (1, 1, 1000, 0, 500, 0.010),
                  (0, 2, 2000, 1800, 500, 0.004), (1, 2, 2000, 1700, 500, 0.004)],
             proposal={"id": "rms_norm-aaaaaa", "candidate": "rms_norm-c0-t2", "speedup": 1.6},
             latency={"before": {"tpot_p50_ms": 10.0}, "after": {"tpot_p50_ms": 9.0}})
    make_run(root / "1", temperature=0.8, env=CPU_ENV,
             candidates=[(0, 1, "compile_error", None), (1, 1, "unmeasured", None)],
             llm=[(0, 1, 1000, 0, 400, 0.008), (1, 1, 1000, 0, 600, 0.012)],
             proposal={"id": "rms_norm-bbbbbb", "candidate": "rms_norm-c1-t1", "speedup": None, "status": "open",
                       "evidence_path": "/repo/.git/autotune/evidence/rms_norm-bbbbbb.md"})
    return root


@pytest.fixture(scope="module")
def report(sweep, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    return build([sweep], out)


def csv(report, name: str) -> pd.DataFrame:
    return pd.read_csv(report.out / f"{name}.csv")


def test_best_speedup_so_far_follows_the_ledger(report):
    p = csv(report, "progress")
    gpu = p[p["run"].str.endswith("/0")]
    assert list(gpu["tried"]) == [1, 2, 3, 4]
    assert gpu["best_so_far"].tolist()[1:] == [1.25, 1.6, 1.6]  # the slower 0.9 does not lower the best
    assert gpu["dollars"].tolist() == pytest.approx([0.028, 0.028, 0.028, 0.028])  # all requests came first
    assert p[p["run"].str.endswith("/1")]["speedup"].isna().all()  # the CPU run: not measured, not zero


def test_costs_failures_and_cache_per_turn(report):
    c = csv(report, "costs").set_index(csv(report, "costs")["run"].str[-1])
    assert c.loc["0", "accepted"] == 2 and c.loc["0", "per_kernel_basis"] == "accepted"
    assert c.loc["0", "tokens"] == 8000 and c.loc["0", "tokens_per_kernel"] == 4000
    # per attempt, as the run summary counts it: c0-t1 incorrect and c1-t2 slower (correct, not passing) failed
    assert c.loc["0", "failed_token_share"] == pytest.approx((1500 + 2500) / 8000, abs=1e-4)  # summary.json rounds
    assert c.loc["0", "correct"] == 3 and c.loc["0", "failed_attempts"] == 2 and c.loc["0", "retries"] == 2
    assert c.loc["1", "per_kernel_basis"] == "passing (unmeasured)"
    assert c.loc["1", "failed_token_share"] == pytest.approx(1400 / 3000, abs=1e-4)
    cache = csv(report, "cache_per_turn").set_index("turn")
    assert cache.loc[1, "hit_rate"] == 0 and cache.loc[2, "hit_rate"] == pytest.approx(3500 / 4000)


def test_statuses_gains_and_settings(report):
    s = csv(report, "statuses_per_turn").set_index("turn")
    assert s.loc[1, "accepted"] == 1 and s.loc[2, "accepted"] == 1 and s.loc[1, "compile_error"] == 1
    g = csv(report, "proposals").set_index("proposal")
    assert g.loc["rms_norm-aaaaaa", "projected_gain"] == pytest.approx(0.2 * (1 - 1 / 1.6))
    assert g.loc["rms_norm-aaaaaa", "measured_gain"] == pytest.approx(0.1)
    # never timed: no gain projected from an assumed speedup (the profile's projected_gain is 0.1)
    assert pd.isna(g.loc["rms_norm-bbbbbb", "speedup"]) and pd.isna(g.loc["rms_norm-bbbbbb", "projected_gain"])
    assert g.loc["rms_norm-bbbbbb", "status"] == "open (as published)"  # no publish repository to ask
    settings = csv(report, "settings")
    assert settings["set:agent.temperature"].tolist() == [0.2, 0.8]  # the sweep's axis, read from config.yaml
    assert settings["best_speedup"].tolist()[0] == 1.6 and pd.isna(settings["best_speedup"].tolist()[1])


def test_every_figure_names_its_environment(report):
    assert len(report.pngs) == 6 and all(p.stat().st_size > 5000 for p in report.pngs)  # the GPU run measured
    html = report.html.read_text()
    assert "NVIDIA H100 80GB HBM3, driver 550.54, torch 2.13.0, triton 3.9.0, commit 0123456789" in html
    assert html.count('src="data:image/png;base64,') == 6 and "<img src=\"http" not in html
    md = report.markdown.read_text()
    assert "![Best speedup so far vs candidates tried](best_vs_candidates.png)" in md
    assert "| 0 | 0.2 | openai | qwen-coder | 0.2 | 2 | 2 | default | rms_norm | 4 | 3 | 2 | 2 | 1.6 |" in md  # judged, correct, passing, accepted, best


def test_without_a_gpu_the_report_opens_with_the_proposals_and_draws_nothing_unmeasured(sweep, tmp_path):
    cpu_only = build([sweep / "1"], tmp_path / "cpu")
    html = cpu_only.html.read_text()
    assert html.index("Proposed kernels (1)") < html.index("Cost per run") < html.index("Settings side by side")
    row = re.search(r"<td>rms_norm-bbbbbb</td>.*?</tr>", html, re.S).group(0)
    cells = re.findall(r"<td>(.*?)</td>", row)
    assert cells[2:7] == ["20.0%", "not measured", "-", "-", "open (as published)"], cells  # share as a percentage
    assert "No speedup was measured (no GPU)" in html
    # the speedup plots and the gains plot have nothing to show: one line each, no image, no PNG
    assert "<b>Best speedup so far vs candidates tried</b>: not drawn: no speedup was measured" in html
    assert "not drawn: no proposal has a measured speedup or a measured end-to-end gain" in html
    assert html.count('src="data:image/png;base64,') == 3 and len(cpu_only.pngs) == 3  # verdicts, cost, cache
    assert "not drawn: no speedup was measured" in cpu_only.markdown.read_text()
    assert pd.read_csv(cpu_only.out / "progress.csv")["best_so_far"].isna().all()


def test_the_review_state_is_the_publish_repositorys_now(sweep, tmp_path):
    """A proposal approved after its run: the report says "approved", read from the repository the run published
    into (config.yaml's publish.repo), not "open" as the ledger recorded it at publishing."""
    import git

    from autotune.publish import records
    from autotune.publish.types import Proposal, ProposalStatus

    repo = git.Repo.init(tmp_path / "repo", initial_branch="main")
    repo.index.commit("init", author=git.Actor("t", "t@localhost"), committer=git.Actor("t", "t@localhost"))
    records.save(repo, Proposal(id="rms_norm-bbbbbb", target="rms_norm", branch="b", base="main", commit="c",
                                status=ProposalStatus.APPROVED, created_at="2026-12-03T00:00:00+00:00", pr_url=None,
                                pr_number=None, reason=None, evidence_path="e", verdict_status="unmeasured",
                                speedup=None))
    run = shutil.copytree(sweep / "1", tmp_path / "run")
    cfg = OmegaConf.load(run / "config.yaml")
    cfg.publish = {"repo": str(tmp_path / "repo")}
    OmegaConf.save(cfg, run / "config.yaml")
    assert pd.read_csv(build([run], tmp_path / "out").out / "proposals.csv")["status"].tolist() == ["approved"]


def test_a_run_that_died_before_judging_anything_is_a_row_that_says_why(sweep, tmp_path):
    """A real `autotune run` whose LLM endpoint answers the preflight (it lists the model) and then fails every
    request, reported beside a sweep (issue 29: the report crashed on such a run with "invalid literal for int()")."""
    import git

    from tests.llm_stub import listing_endpoint

    repo = git.Repo.init(tmp_path / "repo", initial_branch="main")
    repo.index.commit("init", author=git.Actor("t", "t@localhost"), committer=git.Actor("t", "t@localhost"))
    trace = Path(__file__).resolve().parents[1] / "profile" / "fixtures" / "vllm_eager_worker.json.gz"
    dead = tmp_path / "dead"
    with listing_endpoint(["m"]) as url:
        done = subprocess.run([sys.executable, "-m", "autotune.cli", "run", "agent=openai", "agent.model=m",
                               f"agent.base_url={url}", "agent.max_retries=0", "targets=[rms_norm]", f"trace={trace}",
                               f"publish.repo={tmp_path / 'repo'}", f"hydra.run.dir={dead}"],
                              capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and (dead / "ledger.jsonl").is_file(), done.stdout + done.stderr
    report = build([sweep, dead], tmp_path / "report")
    settings = pd.read_csv(report.out / "settings.csv")
    died = settings[settings["died"].notna()]
    assert len(settings) == 3 and len(died) == 1  # the sweep's two runs ended well
    assert f"the LLM endpoint {url} answered 500" in died["died"].iloc[0]
    assert died["judged"].iloc[0] == 0 and died["correct"].iloc[0] == 0
    if CHROMIUM.exists():  # the page with a dead run among its folders opens, its images loaded
        widths = image_widths(report.html, tmp_path)
        assert widths and all(w == 750 for w in widths), widths


def test_a_folder_without_runs_is_a_clear_error(tmp_path):
    done = subprocess.run([sys.executable, "-m", "autotune.cli", "report", str(tmp_path)], capture_output=True,
                          text=True)
    assert done.returncode == 2 and "no run directory" in done.stderr


def image_widths(html: Path, tmp_path: Path) -> list[int]:
    """The page opened in a real headless Chromium: each image's decoded width (0: it did not load)."""
    page = tmp_path / "probe.html"  # the report plus a probe that writes each image's decoded width
    probe = ("<script>window.addEventListener('load', () => { const w = [...document.images]"
             ".map(i => i.naturalWidth); document.body.setAttribute('data-widths', w.join(',')); });</script>")
    page.write_text(html.read_text().replace("</body>", probe + "</body>"))
    done = subprocess.run([str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
                           "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    widths = re.search(r'data-widths="([\d,]*)"', done.stdout)
    assert widths, done.stderr[-2000:]
    return [int(w) for w in widths.group(1).split(",") if w]


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium (apt-get install -y chromium)")
def test_the_page_opens_in_chromium_with_every_image_loaded(report, tmp_path):
    assert image_widths(report.html, tmp_path) == [750] * 6  # 7.5 in x 100 dpi, all decoded


def test_unset_prices_are_said_not_counted_as_zero_dollars(tmp_path):
    run = make_run(tmp_path / "unpriced", temperature=0.2, env=CPU_ENV, candidates=[(0, 1, "unmeasured", None)],
                   llm=[(0, 1, 1000, 0, 400, 0.0)])
    costs = pd.read_csv(build([run], tmp_path / "out").out / "costs.csv").iloc[0]
    assert costs["tokens"] == 1400 and pd.isna(costs["dollars"]) and costs["prices"] == "not set (agent.price)"
