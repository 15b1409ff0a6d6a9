"""What a trace cannot show: a frontend trace, shapes not recorded, time inside torch.compile regions.
Also the full real vLLM traces of ../shared/traces when they lie beside the checkout (skipped otherwise)."""

import json
from pathlib import Path

import pytest

from autotune import cli
from autotune.profile import diagnose
from autotune.profile.optable import read_trace

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[2]
# shared/ inside the checkout or beside it (CI), or beside the folder of worktrees
SHARED = next((p for p in (ROOT / "shared", ROOT.parent / "shared", ROOT.parent.parent / "shared")
               if (p / "traces" / "vllm-0.32-cpu").is_dir()), ROOT / "shared") / "traces" / "vllm-0.32-cpu"


def _profile(capsys, *args):
    code = cli.main(["profile", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_frontend_trace_is_refused_with_what_to_give_instead(tmp_path, capsys):
    code, _, err = _profile(capsys, f"trace={FIXTURES / 'vllm_frontend.json.gz'}", f"profile.out_dir={tmp_path}")
    assert code == 2 and "has no torch ops" in err and "frontend trace" in err and "worker's trace" in err
    assert len(err.strip().splitlines()) == 1 and list(tmp_path.iterdir()) == []


def test_a_trace_without_shapes_says_which_flag_records_them(tmp_path):
    trace = read_trace(FIXTURES / "vllm_eager_worker.json.gz")
    assert diagnose.notes(trace) == []
    trace["record_shapes"] = 0
    for e in trace["traceEvents"]:
        for key in ("Input Dims", "Input type", "Concrete Inputs", "Input Strides"):
            e.get("args", {}).pop(key, None)
    (note,) = diagnose.notes(trace)
    assert "shapes were not recorded" in note and "torch_profiler_record_shapes" in note
    del trace["record_shapes"]  # a trace without the metadata: judged by the events
    assert not diagnose.shapes_recorded(trace)


def test_compiled_regions_are_reported_with_their_share_and_the_flags_to_rerun_with(tmp_path, capsys):
    # a real torch 2.13 trace of a torch.compile'd RMSNorm called 3 times (Inductor, CPU)
    trace = read_trace(FIXTURES / "torch_compiled.json.gz")
    compiled_us, regions = diagnose.compiled_time_us(trace)
    assert regions == 3 and compiled_us > 0  # the CompiledFxGraph calls inside the regions are not counted again
    code, out, _ = _profile(capsys, f"trace={FIXTURES / 'torch_compiled.json.gz'}", f"profile.out_dir={tmp_path}")
    assert code == 0 and "none found" in out
    assert "torch.compile region call(s)" in out and "--enforce-eager" in out and "ir_enable_torch_wrap" in out


@pytest.mark.skipif(not SHARED.is_dir(), reason="the full vLLM traces (../shared/traces) are not beside this checkout")
def test_full_shared_vllm_traces_map_every_rotary_and_rms_norm_call(tmp_path, capsys):
    code, out, _ = _profile(capsys, f"trace={SHARED / 'eager-worker.pt.trace.json.gz'}", f"profile.out_dir={tmp_path}")
    assert code == 0 and "rotary_embedding" in out
    (run,) = list(tmp_path.iterdir())
    hot = {h["target"]: h for h in json.loads((run / "hotspots.json").read_text())["hotspots"]}
    # the README's counts: 136 rotary calls, 306 RMSNorms (aten::pow) in 34 steps, 34 of them without residual
    assert hot["rotary_embedding"]["calls"] == 136 and hot["rms_norm"]["calls"] == 34
    assert hot["fused_add_rms_norm"]["calls"] == 272
    assert all(s["shape"][1:] == [8, 2, 32, 32, 1, 2048] for s in hot["rotary_embedding"]["shapes"])
