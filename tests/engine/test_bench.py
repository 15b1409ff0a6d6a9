"""`autotune bench` against two local servers behaving as vLLM's API: the side-by-side table, the measured spread,
the outputs' equality and the gate's exit code."""

import dataclasses
import json
from pathlib import Path

import pytest

from autotune import cli
from autotune.config import compose
from autotune.engine.bench import compare, setups, SetupRun
from autotune.engine.settings import EngineSettings
from autotune.engine.stats import LoadReport, RequestResult
from autotune.errors import UserError

WORKLOAD = ["workload.num_requests=2", "workload.prompt_len.low=4", "workload.prompt_len.high=8",
            "workload.output_len.dist=fixed", "+workload.output_len.value=4", "profile.warmup_requests=1",
            "engine.vocab_size=1000", "bench.prompts=2", "bench.max_tokens=3"]


def _bench(tmp_path, capsys, a_url, b_url, *more):
    code = cli.main(["bench", "engine=vllm", f"engine.url={a_url}", f"+bench.b.url={b_url}", *WORKLOAD,
                     f"bench.out_dir={tmp_path / 'bench'}", *more])
    out = capsys.readouterr()
    (run,) = list((tmp_path / "bench").iterdir())
    return code, out.out + out.err, json.loads((run / "bench.json").read_text()), (run / "bench.md").read_text()


def test_two_equal_setups_pass_the_gate_with_the_spread_measured(fake, tmp_path, capsys):
    # slow enough (100 ms to the first token, 50 ms a token) that the busy client's own delays stay small beside it
    (_, a), (_, b) = fake(first_s=0.1, token_s=0.05), fake(first_s=0.1, token_s=0.05)
    code, out, record, md = _bench(tmp_path, capsys, a, b, "bench.margin=0.5", "bench.repeats=2")
    assert code == 0, out
    assert record["gate"]["passed"] and record["outputs"]["identical"] and record["outputs"]["prompts"] == 2
    a_setup = record["setups"][0]
    assert len(a_setup["reports"]) == 2 and a_setup["summary"]["output tok/s"]["spread"] is not None
    assert a_setup["engine"]["version"] == "0.32.0" and record["environment"]["python"]
    assert "| output tok/s |" in md and "Gate (margin 50%): PASSED" in md and "identical" in md
    # it says what it is doing while it works, and the machine's load beside each setup's figures
    assert "bench: round 1 of 2, setup A (" in out and "bench: A repeat 1 of 1: 2 requests, " in out, out
    assert len(a_setup["load_1m"]) == 2 and record["machine"]["cpus"] and "machine load " in md


def test_different_greedy_outputs_fail_the_gate(fake, tmp_path, capsys):
    (_, a), (_, b) = fake(), fake(shift=1)  # B answers t1 t2 ... where A answers t0 t1 ...
    code, out, record, md = _bench(tmp_path, capsys, a, b, "bench.margin=0.5")
    assert code == 1 and record["outputs"]["differ"] == [0, 1]
    assert "greedy outputs differ on 2 of 2" in " ".join(record["gate"]["reasons"]) and "FAILED" in out


def test_a_slower_b_is_worse_beyond_the_margin_and_without_a_margin_nothing_fails(fake, tmp_path, capsys):
    (_, a), (_, b) = fake(first_s=0.01, token_s=0.005), fake(first_s=0.25, token_s=0.06)
    code, out, record, _ = _bench(tmp_path, capsys, a, b, "bench.margin=0.10", "bench.repeats=2")
    rows = {r["metric"]: r for r in record["comparison"]}
    assert code == 1 and rows["TTFT p50 ms"]["verdict"] == "worse" and rows["output tok/s"]["change"] < -0.1
    code, _, record, _ = _bench(tmp_path / "again", capsys, a, b, "bench.repeats=1")
    assert code == 0 and record["gate"] is None


def _run(label, values):
    reports = [LoadReport.of([RequestResult(0, 0.0, 1, 3, (v / 1e3, v / 1e3 + 0.01, v / 1e3 + 0.02))], 1.0)
               for v in values]
    return SetupRun(label, EngineSettings(name="vllm", url="http://x"), reports)


def test_the_verdict_needs_the_margin_and_ranges_apart():
    a = _run("A", [100, 110])
    rows = {r["metric"]: r["verdict"] for r in compare(a, _run("B", [105, 150]), 0.05)}
    assert rows["TTFT p50 ms"] == "within noise"  # 22% worse in median, but the ranges overlap
    rows = {r["metric"]: r["verdict"] for r in compare(a, _run("B", [130, 140]), 0.05)}
    assert rows["TTFT p50 ms"] == "worse"
    rows = {r["metric"]: r["verdict"] for r in compare(a, _run("B", [112, 113]), 0.5)}
    assert rows["TTFT p50 ms"] == "within noise"  # apart, but inside the margin


def test_bench_refuses_what_it_cannot_compare(tmp_path):
    with pytest.raises(UserError, match="live engine"):
        setups(compose([]))
    with pytest.raises(UserError, match="the same setup"):
        setups(compose(["engine=vllm", "engine.url=http://127.0.0.1:1"]))
    with pytest.raises(UserError, match="per_kernel"):
        setups(compose(["engine=vllm", "engine.url=http://127.0.0.1:1", "+bench.b.url=http://127.0.0.1:2",
                        "bench.per_kernel=true"]))


def test_a_proposals_evidence_carries_the_bench_that_served_its_kernel(fake, tmp_path, capsys):
    import hashlib

    from autotune.engine.bench import bench_for_kernel
    from autotune.publish import evidence
    from tests.publish.conftest import request

    proposal = request()
    plugin = tmp_path / "plugin" / "autotune_vllm_kernels"
    plugin.mkdir(parents=True)
    sha = hashlib.sha256(proposal.source.encode()).hexdigest()
    (plugin / "manifest.json").write_text(json.dumps({"kernels": {"rms_norm": {"id": "k1", "sha256": sha}}}))
    (_, a), (_, b) = fake(), fake()
    _bench(tmp_path, capsys, a, b, "bench.margin=0.9")
    assert bench_for_kernel(proposal.source, tmp_path / "bench") is None  # B served no plugin with it
    (run,) = list((tmp_path / "bench").iterdir())
    record = json.loads((run / "bench.json").read_text())
    record["setups"][1]["kernels"] = {"rms_norm": {"id": "k1", "sha256": sha}}  # as a B with this plugin records
    (run / "bench.json").write_text(json.dumps(record))
    found = bench_for_kernel(proposal.source, tmp_path / "bench")
    assert found["alone"] == "B" and "| output tok/s |" in found["markdown"]
    text = evidence.render(dataclasses.replace(proposal, engine_bench=found), proposal_id="rms_norm-abc123",
                           short_id="abc123", branch="b", base="main", backend="local", sha256="f" * 64)
    section = text.split("## Measured on the engine")[1].split("## Checker notes")[0]
    assert "| output tok/s |" in section and "Gate (margin 90%)" in section and str(run) in section
    plain = evidence.render(proposal, proposal_id="rms_norm-abc123", short_id="abc123", branch="b", base="main",
                            backend="local", sha256="f" * 64)
    assert "Not measured: no `autotune bench`" in plain


def test_per_kernel_attribution_adds_b_with_each_plugin_kernel_alone(tmp_path):
    plugin = tmp_path / "plugin"
    (plugin / "autotune_vllm_kernels").mkdir(parents=True)
    (plugin / "pyproject.toml").write_text("[project]\nname = 'autotune-vllm-kernels'\n")
    (plugin / "autotune_vllm_kernels" / "manifest.json").write_text(json.dumps(
        {"kernels": {"rms_norm": {"id": "k1"}, "silu_and_mul": {"id": "k2"}}}))
    import sys

    runs = setups(compose(["engine=vllm", "engine.launch=true", f"engine.python={sys.executable}", "engine.model=m",
                           f"+bench.b.plugin={plugin}", "bench.per_kernel=true"]))
    assert [r.label for r in runs] == ["A", "B", "B[rms_norm]", "B[silu_and_mul]"]
    assert runs[1].settings.plugin_kernels == () and runs[3].settings.plugin_kernels == ("silu_and_mul",)
    assert runs[0].settings.plugin is None and runs[2].settings.launch


def test_noise_larger_than_the_margin_is_said_beside_the_gate():
    """A loaded 2-core machine gave TPOT +-78% and "within noise" at a 10% margin: the record and the table say the
    gate cannot tell such a difference from the noise there."""
    from autotune.engine.bench import bench_record, markdown

    a, b = _run("A", [10.0, 30.0]), _run("B", [11.0, 12.0])  # A's TTFT spread: (30 - 10) / 20 = 100%
    a.outputs = b.outputs = []
    record = bench_record(compose(["bench.margin=0.1"]), [a, b], 1, 2)
    assert "TTFT p50 ms ±50%" in record["gate"]["noise_over_margin"], record["gate"]
    assert "The noise is larger than the margin (TTFT p50 ms ±50%" in markdown(record)
    quiet = bench_record(compose(["bench.margin=0.1"]), [b, b], 1, 2)
    assert quiet["gate"]["noise_over_margin"] == []


def test_a_bench_after_the_proposal_reaches_its_evidence_open_or_approved(fake, tmp_path, capsys):
    """A kernel proposed (and then approved) before any bench served it: the bench whose B served it adds its table
    to that proposal's evidence page, which `autotune review show` reads; a second look adds nothing twice."""
    import git

    from autotune import publish
    from tests.publish.conftest import request

    repo = git.Repo.init(tmp_path / "repo", initial_branch="main")
    (tmp_path / "repo" / "README.md").write_text("kernels land here\n")
    repo.index.add(["README.md"])
    repo.index.commit("init", author=git.Actor("t", "t@localhost"), committer=git.Actor("t", "t@localhost"))
    cfg = compose([f"publish.repo={tmp_path / 'repo'}"])
    proposal = publish.approve(cfg, publish.publish(request(), cfg).id)
    (_, a), (_, b) = fake(), fake()
    _bench(tmp_path, capsys, a, b, "bench.margin=0.9")
    (run,) = list((tmp_path / "bench").iterdir())
    record = json.loads((run / "bench.json").read_text()) | {"dir": str(run)}
    assert publish.attach_bench(cfg, record) == []  # B served no plugin with it
    record["setups"][1]["kernels"] = {"rms_norm": {"id": "k1", "sha256": proposal.sha256}}  # as B's plugin records
    assert publish.attach_bench(cfg, record) == [proposal.id]
    page = publish.get_proposal(cfg, proposal.id).evidence_path
    text = Path(page).read_text()
    assert f"## Served on a live engine after it was proposed (`autotune bench`, {run})" in text
    assert "Setup B served this kernel (approved when the bench ran)." in text and "| output tok/s |" in text
    assert publish.attach_bench(cfg, record) == [] and Path(page).read_text() == text  # once
