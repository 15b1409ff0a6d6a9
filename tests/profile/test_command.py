"""`autotune profile` end to end on the tiny model: real serving, real traces, the CLI, and bad inputs."""

import collections
import contextlib
import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from autotune import cli
from autotune.config import compose
from autotune.profile import read_op_table, read_trace
from autotune.serve import dispatch

# A small, fast workload: 4 requests arriving within milliseconds, short prompts and outputs.
SMALL = ["workload.num_requests=4", "workload.prompt_len.low=8", "workload.prompt_len.high=40",
         "workload.output_len.low=3", "workload.output_len.high=6", "workload.arrival.rate_per_s=2000",
         "profile.warmup_requests=1"]
RECORDED = ("rms_norm", "silu_and_mul", "fused_add_rms_norm")


def _recorder(name, seen):
    reference = dispatch.current(name)

    def record(*args):
        profiling = torch._C._autograd._profiler_enabled()
        seen[(name, tuple(args[0].shape), str(args[0].dtype).removeprefix("torch."), profiling)] += 1
        return reference(*args)
    return record


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """One `autotune profile` run (in this process, through the CLI entry point) with every call recorded."""
    out = tmp_path_factory.mktemp("traces")
    seen = collections.Counter()
    stdout = io.StringIO()
    with dispatch.using({n: _recorder(n, seen) for n in RECORDED}), contextlib.redirect_stdout(stdout):
        code = cli.main(["profile", f"profile.out_dir={out}", *SMALL])
    assert code == 0
    (run,) = [p for p in out.iterdir()]
    return run, seen, stdout.getvalue()


def test_profile_finds_the_targets_with_the_shapes_the_model_used(profiled):
    run, seen, _ = profiled
    record = json.loads((run / "hotspots.json").read_text())
    found = {h["target"]: h for h in record["hotspots"]}
    assert {"rms_norm", "silu_and_mul"} <= set(found)
    for name in RECORDED:
        expected = {(shape, dtype): n for (op, shape, dtype, on), n in seen.items() if op == name and on}
        got = {(tuple(s["shape"]), s["dtype"]): s["calls"] for s in found[name]["shapes"]}
        assert got == expected, name
        assert found[name]["calls"] == sum(expected.values())
    warmup_calls = sum(n for (_, _, _, on), n in seen.items() if not on)
    assert warmup_calls > 0  # the warm-up request ran, outside the profile
    model = compose(SMALL).model
    serve = json.loads((run / "serve.json").read_text())
    # one silu_and_mul per layer per forward, on every token fed: prompts + outputs but each request's last token
    tokens_fed = serve["prompt_tokens"] + serve["output_tokens"] - serve["num_requests"]
    silu = found["silu_and_mul"]["shapes"]
    assert {s["shape"][-1] for s in silu} == {2 * model.intermediate_size}
    assert sum(s["shape"][0] * s["calls"] for s in silu) == model.num_layers * tokens_fed
    assert {s["shape"][-1] for s in found["rms_norm"]["shapes"]} == {model.hidden_size}
    assert [h["share"] for h in record["hotspots"]] == sorted((h["share"] for h in record["hotspots"]), reverse=True)


def test_profile_writes_a_complete_run_whose_trace_carries_its_environment(profiled):
    run, _, stdout = profiled
    assert {"trace.json.gz", "ops.csv", "hotspots.json", "env.json", "serve.json"} <= set(os.listdir(run))
    trace = read_trace(run / "trace.json.gz")
    environment = json.loads((run / "env.json").read_text())
    assert trace["autotune_environment"] == environment and environment["torch"] == torch.__version__
    assert trace["autotune_serve"] == json.loads((run / "serve.json").read_text())
    record = json.loads((run / "hotspots.json").read_text())
    assert record["run"] == run.name and Path(record["trace"]) == (run / "trace.json.gz").resolve()
    assert record["environment"] == environment and record["assumed_speedup"] == 2.0
    ops = read_op_table(run / "ops.csv")
    assert list(ops.columns) == ["op", "target", "input_shapes", "case_shape", "dtype", "calls", "total_us", "max_us",
                                 "self_us", "device_us", "share"]
    assert ops["device_us"].isna().all() == (not torch.cuda.is_available())
    cover = record["coverage"]  # the targets' share of op time, and the rest by op name
    targets_us = sum(h["total_us"] for h in record["hotspots"])
    assert cover["covered_us"] == pytest.approx(targets_us) and 0 < cover["share"] < 1
    assert cover["ops_us"] == pytest.approx(cover["covered_us"] + sum(u["time_us"] for u in cover["uncovered"]))
    # the model's projections and attention run through the linear and attention targets' dispatch points: the aten
    # ops inside them count once, for their target, and are in no uncovered row
    assert {"linear", "paged_attention"} <= {h["target"] for h in record["hotspots"]}
    assert not {"aten::linear", "aten::_softmax"} & {u["op"] for u in cover["uncovered"]}
    assert f"targets cover {100 * cover['share']:.1f}% of the time spent in ops" in stdout.replace("\n", " ")
    for words in ("hot spots", "rms_norm", "silu_and_mul", "TTFT", "TPOT", "tokens/s", str(run)):
        assert words in stdout.replace("\n", ""), words


def _autotune(*args, cwd):
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def test_own_trace_round_trips_through_the_cli_to_the_same_op_table(profiled, tmp_path):
    run, _, _ = profiled
    done = _autotune("profile", f"trace={run / 'trace.json.gz'}", f"profile.out_dir={tmp_path}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (again,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    pd.testing.assert_frame_equal(read_op_table(again / "ops.csv"), read_op_table(run / "ops.csv"))
    first, second = (json.loads((d / "hotspots.json").read_text()) for d in (run, again))
    assert {k: v for k, v in second.items() if k not in ("run", "trace")} == \
           {k: v for k, v in first.items() if k not in ("run", "trace")}
    assert (again / "serve.json").read_text() == (run / "serve.json").read_text()
    assert "TTFT" in done.stdout  # the serve report travelled inside the trace


def _bad(kind: str, tmp: Path) -> list[str]:
    trace = tmp / "in" / "trace.json.gz"
    trace.parent.mkdir()
    content = {"gzip": b"\x1f\x8b\x08\x00 not gzip", "json": b'{"traceEvents": [', "events": b'{"x": 1}'}
    if kind in content:
        trace.write_bytes(content[kind])
    return {"missing": [f"trace={tmp / 'nope.json'}"], "gzip": [f"trace={trace}"], "json": [f"trace={trace}"],
            "events": [f"trace={trace}"], "preset": ["model=nope"], "override": ["profile.nope=1"],
            "workload": ["workload.num_requests=0"], "speedup": ["profile.assumed_speedup=0"],
            "negative": ["profile.warmup_requests=-1"]}[kind]


@pytest.mark.parametrize("kind, says", [
    ("missing", "not found"), ("gzip", "not a readable gzip"), ("json", "not valid JSON"),
    ("events", "no traceEvents"), ("preset", "unknown model preset 'nope'"), ("override", "unknown setting"),
    ("workload", "no requests"), ("speedup", "assumed_speedup"), ("negative", "warmup_requests=-1 is negative"),
])
def test_bad_input_is_one_line_exit_2_and_no_run(kind, says, tmp_path, capsys):
    out = tmp_path / "traces"
    code = cli.main(["profile", f"profile.out_dir={out}", *_bad(kind, tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: ") and says in err and "\n" not in err, err
    assert not out.exists() or os.listdir(out) == []


def test_cli_subprocess_reports_a_corrupt_trace(tmp_path):
    bad = tmp_path / "t.json.gz"
    bad.write_bytes(gzip.compress(b"[1, 2"))
    done = _autotune("profile", f"trace={bad}", f"profile.out_dir={tmp_path / 'traces'}", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("error: ") and "not valid JSON" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "traces").exists()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_ops_take_their_kernel_time(tmp_path):
    from autotune.profile import profile_serving

    result = profile_serving(compose([f"profile.out_dir={tmp_path}", "device=cuda", *SMALL]))
    rows = result.ops[result.ops["target"] != ""]
    assert rows["device_us"].notna().all() and (rows["device_us"] > 0).all()
    assert {"rms_norm", "silu_and_mul"} <= {h["target"] for h in result.hotspots["hotspots"]}
    assert result.environment["gpu"]
