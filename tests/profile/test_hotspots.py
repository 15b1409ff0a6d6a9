"""Hot-spot ranking, the Amdahl projection, the newest-run lookup, run-folder atomicity, nsight's skip line."""

import json
import os
from pathlib import Path

import pytest
import torch

from autotune.config import compose
from autotune.errors import UserError
from autotune.profile import nsight
from autotune.profile.hotspots import (amdahl_gain, hotspot_for, hotspots_record, latest_hotspots, rank_hotspots,
                                       shapes_for)
from autotune.records import Hotspot, ProfiledShape
from autotune.profile.optable import op_table, read_trace, serving_time_us
from autotune.profile.profiler import building

FIXTURES = Path(__file__).parent / "fixtures"


def test_amdahl_gain():
    assert amdahl_gain(0.5, 2.0) == pytest.approx(0.25)
    assert amdahl_gain(0.2, 4.0) == pytest.approx(0.15)
    assert amdahl_gain(0.0, 10.0) == 0.0
    assert amdahl_gain(0.3, 1.0) == pytest.approx(0.0)


def test_ranking_of_the_gpu_fixture_matches_the_hotspots_schema():
    trace = read_trace(FIXTURES / "kineto_gpu.json")
    hot = rank_hotspots(op_table(trace), serving_time_us(trace), 4.0)
    assert [h.target for h in hot] == ["linear", "rms_norm", "silu_and_mul"]
    # aten::mm(x [8, 4096], weight.T [4096, 28672]): linear's case (M, N, K), its 80 us of kernel time
    assert hot[0].shapes == (ProfiledShape((8, 28672, 4096), "bfloat16", 1, 80.0),)
    rms = hot[1]
    assert (rms.calls, rms.total_us, rms.share) == (2, 23.0, pytest.approx(0.023))
    assert rms.projected_gain == pytest.approx(0.023 * (1 - 1 / 4))
    assert rms.shapes == (ProfiledShape((8, 4096), "bfloat16", 1, 20.0), ProfiledShape((1, 4096), "bfloat16", 1, 3.0))
    entry = json.loads(json.dumps(hotspots_record("r", "t", 1000.0, 4.0, {}, hot)))["hotspots"][1]  # plain JSON
    assert set(entry) == {"target", "share", "calls", "total_us", "projected_gain", "shapes"}
    assert entry["shapes"][0] == {"shape": [8, 4096], "dtype": "bfloat16", "calls": 1, "total_us": 20.0}
    assert Hotspot.from_dict(entry) == rms  # hotspots.json's entry reads back into the same record
    with pytest.raises(UserError, match="assumed_speedup"):
        rank_hotspots(op_table(trace), 1000.0, 0.0)


def _run(out: Path, name: str, targets: dict, hidden: bool = False) -> None:
    d = out / (f".{name}.partial" if hidden else name)
    d.mkdir(parents=True)
    record = {"run": name, "hotspots": [{"target": t, "shapes": [{"shape": s, "dtype": "float32", "calls": c}
                                                                 for s, c in shapes]} for t, shapes in targets.items()]}
    (d / "hotspots.json").write_text(json.dumps(record))


def test_latest_hotspots_takes_the_newest_complete_run(tmp_path):
    assert latest_hotspots(tmp_path / "none") is None
    _run(tmp_path, "20261129-100000-aaaa", {"rms_norm": [([1, 64], 3)]})
    _run(tmp_path, "20261130-090000-bbbb", {"rms_norm": [([7, 128], 5), ([1, 128], 2)]})
    _run(tmp_path, "20261130-120000-cccc", {"rms_norm": [([9, 9], 1)]}, hidden=True)  # still being written
    (tmp_path / "20261130-130000-dddd").mkdir()  # no hotspots.json: not a complete run
    latest = latest_hotspots(tmp_path)
    assert latest["run"] == "20261130-090000-bbbb"
    assert shapes_for("rms_norm", latest) == [ProfiledShape((7, 128), "float32", 5),
                                              ProfiledShape((1, 128), "float32", 2)]
    assert hotspot_for("rms_norm", latest).run == "20261130-090000-bbbb"  # with its profile's run
    assert shapes_for("softmax", latest) == [] and shapes_for("rms_norm", None) == []


@pytest.mark.parametrize("error", [RuntimeError("serving failed"), KeyboardInterrupt()])
def test_a_failed_or_interrupted_run_leaves_nothing_that_looks_complete(tmp_path, error):
    with pytest.raises(type(error)):
        with building(tmp_path, "20261130-000000-abcd") as partial:
            (partial / "hotspots.json").write_text("{}")
            raise error
    assert os.listdir(tmp_path) == []
    with building(tmp_path, "20261130-000001-abcd") as partial:
        (partial / "hotspots.json").write_text("{}")
    assert os.listdir(tmp_path) == ["20261130-000001-abcd"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")
def test_nsight_without_a_gpu_is_skipped_with_one_line(tmp_path):
    record = {"hotspots": [{"target": "rms_norm", "shapes": [{"shape": [4, 64], "dtype": "float32"}]}]}
    for device in ("cpu", "cuda"):  # device=cuda reading a trace on a machine without one: still only skipped
        metrics, note = nsight.measure(compose(["profile.nsight=true", f"device={device}"]), record, tmp_path)
        assert metrics is None and note.startswith("nsight skipped: no GPU") and "\n" not in note
    assert nsight.cases(record, 3) == [{"target": "rms_norm", "shape": [4, 64], "dtype": "float32"}]
    assert list(tmp_path.iterdir()) == []


def test_a_target_whose_time_is_mostly_one_call_is_flagged_as_an_outlier(tmp_path, capsys):
    """vLLM 0.32's CPU worker (the fixture): one silu_and_mul call took 0.93 of its 2.69 ms over 12 calls. The op
    table keeps each row's longest call; the profile's notes flag the target whose share it inflates, not one whose
    longest call is an ordinary share of many (linear: 4.2 of 34.4 ms)."""
    from autotune.cli import main
    from autotune.profile.hotspots import outlier_notes

    trace = FIXTURES / "vllm_eager_worker.json.gz"
    ops = op_table(read_trace(trace))
    assert (ops["max_us"] <= ops["total_us"]).all() and (ops["max_us"] * ops["calls"] >= ops["total_us"] - 1e-6).all()
    (note,) = outlier_notes(ops)
    assert note.startswith("outlier: one call of silu_and_mul took 0.93 ms, 35% of its 2.69 ms over 12 calls")
    assert main(["profile", f"trace={trace}", f"profile.out_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert "note: outlier: one call of silu_and_mul" in out and "share of serving time" in out
