"""The evidence page for a verdict measured on a GPU (rendered here from the checker's record; no GPU needed)."""

from __future__ import annotations

import dataclasses

import pytest

from autotune.records import ProfiledShape
from autotune.publish import evidence
from autotune.verify.verdict import ShapeTiming, Status


@pytest.fixture
def measured(make_request, make_verdict):
    v = make_verdict(Status.ACCEPTED, "1.31x faster than torch.compile | weighted by calls")
    v.measured, v.speedup_geomean = True, 1.31
    v.timings = [ShapeTiming([7, 1000], "float32", 4.21, 0.12, 9.8, 5.52, 1.311, 3.1, 73.6, calls=40, bound="memory"),
                 ShapeTiming([7, 1000], "bfloat16", 3.05, 0.08, 8.1, 1.0, 0.33, 1.6, 52.5, calls=1, implausible=True,
                             bound="memory")]
    v.cases[0] = dataclasses.replace(v.cases[0], passed=False, max_abs_err=0.25, note="max abs err 0.25 at row 3")
    v.notes = ["served values the CPU plan never ran with every program: rows 2048 (every program up to 64)"]
    check = {"prompts": 4, "new_tokens": 8, "tokens_identical": False, "max_logit_diff": 0.5, "logit_tolerance": 1e-4,
             "reference_calls": 1536, "kernel_calls": 1536,
             "latency": {"before": {"ttft_p50_ms": 20.0, "tpot_p50_ms": 5.0}, "after": {"ttft_p50_ms": 19.0, "tpot_p50_ms": 4.5}}}
    return dataclasses.replace(make_request(v=v), model_check=check)


def test_measured_verdicts_get_a_timing_table_and_the_gain_at_the_measured_speedup(measured):
    text = evidence.render(measured, proposal_id="rms_norm-abc123", short_id="abc123", branch="autotune/rms_norm-abc123",
                           base="main", backend="github", sha256="f" * 64)
    assert text.startswith("# rms_norm: Triton kernel `abc123` — 1.31× faster than the best baseline\n")
    assert "| 7×1000 | float32 | 40 | 4.21 ± 0.12 | 9.80 | 5.52 | 1.31× | 3.10 | memory | 74% |" in text
    assert "| 52% ⚠ faster than the roofline floor |" in text
    # share 12%, 1.31x: 1 - (0.88 + 0.12 / 1.31) = 2.8% of serving time
    assert "**2.8%** of serving time at the measured 1.31×" in text
    assert "1.31x faster than torch.compile \\| weighted by calls" in text  # a "|" cannot break the table
    assert "| 7×1000 | float32 | normal | profile | 2.5e-01 | 3.1e-07 | 1.3e-06, 1.0e-05 | 0/1 — max abs err 0.25 at row 3 |" in text
    assert "⚠ Greedy tokens DIFFER" in text and "(tolerance 1.0e-04)" in text
    assert "The kernel served 1,536 of the model's 1,536 calls to it." in text
    assert "| ttft_p50_ms | 20 | 19 | -5.0% |" in text and "| tpot_p50_ms | 5 | 4.5 | -10.0% |" in text
    assert "Merging this pull request registers the kernel" in text and "autotune review approve" not in text
    assert "- served values the CPU plan never ran with every program: rows 2048 (every program up to 64).\n" in text


def test_the_pull_request_title_says_what_it_brings(measured, make_request):
    assert evidence.title(measured, "rms_norm-abc123") == "rms_norm: Triton kernel rms_norm-abc123, 1.31× faster than the best baseline"
    assert evidence.title(make_request(), "rms_norm-abc123").endswith("correct, speed not measured (no GPU)")


def test_many_profile_shapes_stay_readable_and_the_regression_test_takes_the_most_called(make_request):
    req = make_request()
    req.hotspot = dataclasses.replace(req.hotspot, shapes=tuple(ProfiledShape((n, 1000), "float32", n % 7, 10.0 * n)
                                                                for n in range(1, 15)))
    text = evidence.render(req, proposal_id="rms_norm-abc123", short_id="abc123", branch="b", base="main",
                           backend="local", sha256="0" * 64)
    assert "| 12×1000 | float32 | 5 | 120 |" in text and "| 13×1000 |" not in text
    assert "| 2 more shapes | | 6 | 270 |" in text  # 13 and 14 rows: calls 6 + 0, 130 + 140 µs
    assert "| float32 | 4/4 | 2.4e-07 | 3.1e-07 | 1.3e-06, 1.0e-05 |" in text
    assert [(s.shape, s.dtype, s.calls) for s in evidence.regression_shapes(req)] == [
        ((6, 1000), "float32", 6), ((13, 1000), "float32", 6), ((5, 1000), "float32", 5), ((12, 1000), "float32", 5)]
    test_source = evidence.regression_test(req, proposal_id="rms_norm-abc123", short_id="abc123")
    compile(test_source, "test_rms_norm_abc123.py", "exec")
    assert "((6, 1000), \"float32\", 6)," in test_source and "verify.dtypes=[bfloat16,float32]" in test_source


def test_a_page_too_long_for_a_pull_request_body_is_cut_at_its_folded_sections(make_request):
    text = evidence.render(make_request(), proposal_id="rms_norm-abc123", short_id="abc123", branch="b", base="main",
                           backend="github", sha256="0" * 64)
    assert evidence.fit(text, len(text)) == text
    short = evidence.fit(text, len(text) - 1)
    assert short.count("Too long for a pull request body: see EVIDENCE.md on the branch.") == 2
    assert "| 1×128 | float32 | normal | edge |" not in short and "def rms_norm(" not in short
    assert "| float32 | 4/4 |" in short and evidence.parse_metadata(short) == evidence.parse_metadata(text)
    tiny = evidence.fit(text, 2000)
    assert len(tiny) <= 2000 and evidence.parse_metadata(tiny)["proposal"] == "rms_norm-abc123"
