"""The messages: what the model is told, and that nothing run-specific leaks into them."""

from pathlib import Path

from autotune import targets
from autotune.agent import prompts
from autotune.config import compose
from autotune.profile.records import Hotspot, ProfiledShape
from autotune.verify.verdict import CaseResult, ShapeTiming, Status, Verdict

HOTSPOT = Hotspot("rms_norm", share=0.083, calls=1234, total_us=4567.0, projected_gain=0.04,
                  shapes=(ProfiledShape((1, 2048), "bfloat16", 1000, 3000.0),
                          ProfiledShape((37, 2048), "bfloat16", 234, 1567.0)))
ROOF = prompts.Roofline(2000.0, "test figure")


def test_system_message_states_the_contract_and_is_the_same_for_every_target():
    text = prompts.system_message()
    for must in ("@triton.jit", "float32", "mask", "num_warps", "```python", "torch.empty"):
        assert must in text
    assert text == prompts.system_message()


def test_system_message_shows_the_example_file(tmp_path):
    example = tmp_path / "rms_norm.py"
    example.write_text("def rms_norm(x, weight, eps):\n    return 'EXAMPLE-BODY'\n")
    assert "EXAMPLE-BODY" in prompts.system_message(example)
    assert "EXAMPLE-BODY" not in prompts.system_message(tmp_path / "absent.py")


def test_task_message_has_reference_shapes_roofline_and_rejections():
    target = targets.get("rms_norm")
    text = prompts.task_message(target, HOTSPOT, ROOF, index=1, candidates=3,
                                rejections=["slower than torch.compile at /runs/2026/x/c0_t1.py"])
    assert target.signature in text and "xf.pow(2).mean" in text  # the reference's source
    assert "8.3% of serving time" in text and "| 37x2048 | bfloat16 | 234 | 34.3% |" in text
    # 37 x 2048 bf16: (2 * 37 * 2048 + 2048) * 2 bytes = 307,200 B; at 2000 GB/s the floor is 0.15 us.
    assert "307.20 KB | 154 ns | memory |" in text and "2,000 GB/s" in text and "test figure" in text
    assert "c0_t1.py" in text and "/runs/" not in text
    assert "candidate 2 of 3" in text


def test_task_message_without_profile_uses_default_shapes_and_states_assumption():
    target = targets.get("silu_and_mul")
    text = prompts.task_message(target, None, prompts.roofline(compose(["device=cpu"])), index=0, candidates=1)
    assert "No profile was taken" in text and "| 64x28672 | float16 | - | - |" in text
    assert "3,350 GB/s" in text and "assumed: an H100 SXM's, since no GPU was seen here" in text
    given = prompts.roofline(compose(["verify.peak_bandwidth_gbps=1000"]))
    assert given == prompts.Roofline(1000.0, "set by verify.peak_bandwidth_gbps")


def test_feedback_shows_the_failing_case_and_a_trimmed_traceback_without_paths():
    tb = ('Traceback (most recent call last):\n'
          '  File "/work/main/autotune/verify/harness.py", line 40, in run\n    out = fn(*args)\n'
          '  File "/tmp/sandbox-81x2/c0_t1.py", line 22, in rms_norm\n    _k[(n,)](x)\n'
          '  File "/work/main/.venv/lib/python3.11/site-packages/triton/runtime/jit.py", line 9, in run\n    x\n'
          'ValueError: shape mismatch in /tmp/sandbox-81x2/c0_t1.py')
    case = CaseResult(shape=[7, 1000], dtype="float32", kind="normal", seed=0, passed=False, max_abs_err=0.0123,
                      max_rel_err=0.0245, rtol=1.3e-6, atol=1e-5)
    verdict = Verdict(status=Status.RUNTIME_ERROR, reason="the kernel raised on 1 of 12 cases", target="rms_norm",
                      candidate="/runs/a/candidates/rms_norm/c0_t1.py",
                      cases=[CaseResult([1, 128], "float32", "normal", 0, True), case], stderr_tail=tb)
    text = prompts.feedback_message(verdict, file="c0_t1.py")
    assert "**runtime_error**" in text and "shape 7x1000, float32, normal" in text and "Max |error| 0.0123" in text
    assert 'File "c0_t1.py", line 22' in text and "ValueError: shape mismatch in c0_t1.py" in text
    assert "harness.py" not in text and "jit.py" not in text and "/tmp/" not in text and "/work/" not in text


def test_feedback_on_a_wrong_answer_leaves_out_interpreter_warnings():
    case = CaseResult([7, 1000], "float32", "normal", 0, False, max_abs_err=0.05, max_rel_err=0.01, rtol=1.3e-6,
                      atol=1e-5, note="6993 of 7000 values differ")
    verdict = Verdict(Status.INCORRECT, "case [7, 1000]: 6993 of 7000 values differ", "rms_norm", "x.py", cases=[case],
                      stderr_tail="interpreter.py:599: RuntimeWarning: invalid value encountered in multiply")
    text = prompts.feedback_message(verdict, file="c0_t1.py")
    assert "Max |error| 0.05, max relative error 0.01; allowed: atol 1e-05 + rtol 1.3e-06" in text
    assert "RuntimeWarning" not in text and text.count("6993 of 7000") == 1  # the note repeats the reason


def test_feedback_on_a_reply_without_code_and_on_measured_timings():
    text = prompts.feedback_message(None, file="c0_t2.py", no_code="the reply has no fenced code block")
    assert "no file from your last reply: the reply has no fenced code block" in text
    timing = ShapeTiming([64, 4096], "bfloat16", 10.0, 0.2, 12.0, 11.0, 1.1, 0.6, 6.0, calls=5)
    verdict = Verdict(Status.SLOWER, "not faster than torch.compile beyond the noise margin", "rms_norm", "x.py",
                      timings=[timing], speedup_geomean=1.01, measured=True)
    text = prompts.feedback_message(verdict, file="c0_t1.py")
    assert "| 64x4096 | bfloat16 | 10 | 12 | 11 | 1.10x | 6% |" in text and "1.01x" in text and "faster" in text


def test_each_turn_only_appends_so_the_prefix_is_byte_identical():
    convo = prompts.Conversation("S", "T")
    before = [dict(m) for m in convo.messages]
    convo.add_turn("reply 1", "feedback 1", "incorrect")
    assert convo.messages[:2] == before and convo.outcomes == ("incorrect",)
    assert [m["role"] for m in convo.messages] == ["system", "user", "assistant", "user"]


def test_prompts_dir_holds_the_templates():
    assert {p.name for p in Path(prompts.PROMPTS_DIR).glob("*.j2")} >= {"system.md.j2", "task.md.j2", "feedback.md.j2"}
