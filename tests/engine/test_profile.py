"""`autotune profile engine=vllm|sglang` against local servers that behave as vLLM's and SGLang's APIs: the
profiler's endpoints, the worker's trace among the files, the figures and the engine's record in the run folder."""

import json
from pathlib import Path

import pytest

from autotune import cli
from autotune.config import compose
from autotune.engine import profile_engine
from autotune.engine.endpoints import find_trace
from autotune.errors import UserError

WORKLOAD = ["workload.num_requests=4", "workload.prompt_len.low=4", "workload.prompt_len.high=8",
            "workload.output_len.low=3", "workload.output_len.high=5", "profile.warmup_requests=1"]


def _cfg(tmp_path, *overrides):
    return compose([*WORKLOAD, f"profile.out_dir={tmp_path / 'traces'}", "engine.vocab_size=1000", *overrides,
                    "engine.stop_profile_timeout_s=30"])


def test_a_vllm_server_is_driven_profiled_and_its_worker_trace_ranked(fake, tmp_path, capsys):
    state, url = fake(kind="vllm")
    code = cli.main(["profile", "engine=vllm", f"engine.url={url}", f"engine.profile_dir={state.profile_dir}",
                     *WORKLOAD, f"profile.out_dir={tmp_path / 'traces'}", "engine.vocab_size=1000"])
    out = capsys.readouterr().out
    assert code == 0, out
    (run,) = [d for d in (tmp_path / "traces").iterdir() if not d.name.startswith(".")]
    hot = json.loads((run / "hotspots.json").read_text())
    # the worker's trace (not the frontend's, written beside it) was read: vLLM's CPU ops map to the targets
    assert {"linear", "silu_and_mul", "rms_norm", "fused_add_rms_norm", "rotary_embedding"} <= {
        h["target"] for h in hot["hotspots"]}
    assert 0.2 < hot["coverage"]["share"] < 1
    load = json.loads((run / "load.json").read_text())
    assert load["num_requests"] == 4 and load["failed"] == 0 and load["ttft_ms"]["p95"] > 0
    engine = json.loads((run / "env.json").read_text())["engine"]
    assert (engine["name"], engine["version"], engine["model"], engine["launched"]) == ("vllm", "0.32.0", "tiny", False)
    # 1 warm-up outside the window, then the 4 profiled; the window is opened and closed once
    assert len(state.requests) == 5 and len(state.profile_bodies) == 2
    assert "TTFT" in out and "targets cover" in out and "vllm 0.32.0 serving tiny" in out
    # the slice was taken from a server whose profiler kept Python stacks (vLLM's default): said, with the fix
    assert "recorded Python stacks" in out and '"torch_profiler_with_stack": false' in out


def test_a_vllm_server_started_without_profiling_gets_the_flag_to_restart_with(fake, tmp_path):
    _, url = fake(kind="vllm", profile_dir=None)
    with pytest.raises(UserError) as e:
        profile_engine(_cfg(tmp_path, "engine=vllm", f"engine.url={url}", f"engine.profile_dir={tmp_path / 'p'}"))
    said = str(e.value)
    assert "started without profiling" in said and "--profiler-config" in said
    assert '"torch_profiler_record_shapes": true' in said and '"torch_profiler_with_stack": false' in said


def test_a_running_server_needs_its_profiler_folder(fake, tmp_path):
    _, url = fake(kind="vllm")
    with pytest.raises(UserError, match="engine.profile_dir is not set"):
        profile_engine(_cfg(tmp_path, "engine=vllm", f"engine.url={url}"))


def test_a_profile_with_engine_profile_false_says_it_needs_the_trace(fake, tmp_path):
    """The profiler-folder error suggests engine.profile=false (right for `autotune bench`); a profile given it
    used to fail with a TypeError on the missing trace after sending the whole workload."""
    state, url = fake(kind="vllm")
    with pytest.raises(UserError, match="engine.profile=false: profiling the vllm server needs its trace"):
        profile_engine(_cfg(tmp_path, "engine=vllm", f"engine.url={url}", "engine.profile=false"))
    assert not [r for r in state.requests if "completions" in r["path"]]  # refused before the workload


def test_sglang_gets_shapes_on_and_stacks_off_in_the_profile_request(fake, tmp_path):
    state, url = fake(kind="sglang")
    result, load = profile_engine(_cfg(tmp_path, "engine=sglang", f"engine.url={url}",
                                       f"engine.profile_dir={tmp_path / 'sgl'}"))
    start = state.profile_bodies[0]
    assert start == {"record_shapes": True, "with_stack": False, "output_dir": str(tmp_path / "sgl")}
    assert result.hotspots["hotspots"] and load.failed == 0
    assert result.environment["engine"]["version"] == "0.5.23"


def test_find_trace_skips_the_frontend_and_old_files_and_says_what_it_saw(tmp_path):
    fixtures = Path(__file__).resolve().parents[1] / "profile" / "fixtures"
    (tmp_path / "api.1.pt.trace.json.gz").write_bytes((fixtures / "vllm_frontend.json.gz").read_bytes())
    with pytest.raises(UserError) as e:
        find_trace(tmp_path, 0.0, ("*.pt.trace.json.gz",), timeout_s=1.5, poll_s=0.2)
    assert "api.1.pt.trace.json.gz" in str(e.value)
    (tmp_path / "w.2.pt.trace.json.gz").write_bytes((fixtures / "vllm_eager_worker.json.gz").read_bytes())
    assert find_trace(tmp_path, 0.0, ("*.pt.trace.json.gz",), timeout_s=5, poll_s=0.2).name == "w.2.pt.trace.json.gz"


def test_engine_settings_say_what_is_missing(tmp_path):
    for overrides, says in ((["engine=vllm"], "engine.url"), (["engine=vllm", "engine.launch=true"], "engine.model"),
                            (["engine=vllm", "engine.launch=true", "engine.model=m", f"engine.python={tmp_path}/py"],
                             "no such file"),
                            (["engine=vllm", "engine.url=http://x", "engine.plugin=dist"], "engine.launch=true")):
        with pytest.raises(UserError, match=says):
            profile_engine(_cfg(tmp_path, *overrides))
    with pytest.raises(UserError, match="needs a live engine|live engine"):
        cli_code = cli.main(["profile", "workload=agent", "workload.transcript=x"])
        raise UserError("live engine") if cli_code == 2 else AssertionError(cli_code)


def test_attached_to_a_running_server_the_vocabulary_comes_from_the_folder_it_names(fake, tmp_path, capsys):
    """`autotune profile engine=vllm engine.url=URL engine.profile_dir=DIR`, as the README shows it: no
    engine.vocab_size, no engine.model; vLLM's /v1/models names the folder it loaded ("root"), whose config.json
    gives the vocabulary the prompts' token ids are drawn below. Without it, the message says what to set."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"vocab_size": 50}))
    state, url = fake(kind="vllm", root=str(model))
    code = cli.main(["profile", "engine=vllm", f"engine.url={url}", f"engine.profile_dir={state.profile_dir}",
                     *WORKLOAD, f"profile.out_dir={tmp_path / 'traces'}"])
    assert code == 0, capsys.readouterr().out
    ids = [i for r in state.requests for i in r["body"]["prompt"]]
    assert ids and max(ids) < 50
    bare, url = fake(kind="vllm")
    with pytest.raises(UserError, match="the server did not name a model folder on this machine"):
        profile_engine(compose([*WORKLOAD, f"profile.out_dir={tmp_path / 'traces2'}", "engine=vllm",
                                f"engine.url={url}", f"engine.profile_dir={bare.profile_dir}"]))
