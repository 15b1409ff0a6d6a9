"""Cost per request and the per-run numbers: per kernel, failed share, prompt cache hit rate."""

import types

import pytest

from autotune.agent.accounting import Price, Usage, summarize, usage_from_response


def test_cost_charges_cached_prompt_tokens_at_the_cached_price():
    price = Price(input_per_mtok=3.0, cached_input_per_mtok=0.3, output_per_mtok=15.0)
    usage = Usage(prompt_tokens=10_000, cached_tokens=8_000, cached_known=True, completion_tokens=2_000)
    # 2,000 uncached x $3 + 8,000 cached x $0.30 + 2,000 out x $15, per million
    assert price.cost_usd(usage) == pytest.approx((2_000 * 3 + 8_000 * 0.3 + 2_000 * 15) / 1e6)


def test_usage_without_prompt_tokens_details_is_flagged_unknown():
    bare = types.SimpleNamespace(prompt_tokens=100, completion_tokens=20, prompt_tokens_details=None)
    assert usage_from_response(bare) == Usage(100, 0, False, 20)
    detailed = types.SimpleNamespace(prompt_tokens=100, completion_tokens=20,
                                     prompt_tokens_details=types.SimpleNamespace(cached_tokens=64))
    assert usage_from_response(detailed) == Usage(100, 64, True, 20)
    assert usage_from_response(None) == Usage()


def _llm(index, turn, prompt, cached, completion, cost, known=True):
    return {"kind": "llm", "target": "rms_norm", "index": index, "turn": turn, "prompt_tokens": prompt,
            "cached_tokens": cached, "cached_known": known, "completion_tokens": completion, "cost_usd": cost}


def _cand(index, turn, status):
    return {"kind": "candidate", "target": "rms_norm", "index": index, "turn": turn, "status": status}


def test_summary_per_passing_kernel_failed_share_and_cache_hit_rate():
    records = [_llm(0, 1, 1000, 0, 500, 0.010), _cand(0, 1, "incorrect"),
               _llm(0, 2, 1600, 1000, 500, 0.008), _cand(0, 2, "unmeasured"),
               _llm(1, 1, 1000, 900, 400, 0.006), _cand(1, 1, "no_code"),
               _llm(1, 2, 1500, 0, 400, 0.004, known=False), _cand(1, 2, "compile_error")]
    s = summarize(records)
    assert s["requests"] == 4 and s["tokens"] == 5100 + 1800 and s["dollars"] == pytest.approx(0.028)
    assert s["kernels_accepted"] == 0 and s["kernels_passing"] == 1 and s["per_kernel_basis"] == "passing (unmeasured)"
    assert s["tokens_per_kernel"] == 6900 and s["dollars_per_kernel"] == pytest.approx(0.028)
    # per attempt: candidate 0's failed first turn (1,500 tokens) counts with candidate 1's two (1,400 + 1,900),
    # although candidate 0 passed on its second
    assert s["attempts"] == 4 and s["failed_attempts"] == 3 and s["retries"] == 2 and s["failed_candidates"] == 1
    assert s["failed_tokens"] == 4800 and s["failed_token_share"] == pytest.approx(4800 / 6900, abs=1e-4)
    assert s["failed_dollar_share"] == pytest.approx(0.020 / 0.028, abs=1e-4)
    assert s["retry_token_share"] == pytest.approx((2100 + 1900) / 6900, abs=1e-4)
    assert s["targets"]["rms_norm"]["failed_tokens"] == 4800
    # hit rate over the three requests that reported cached tokens: 1,900 of 3,600
    assert s["cache_hit_rate"] == pytest.approx(1900 / 3600, abs=1e-4) and s["cache_reported_requests"] == 3
    assert s["targets"]["rms_norm"]["requests"] == 4


def test_accepted_kernels_are_the_basis_when_there_are_any():
    s = summarize([_llm(0, 1, 100, 0, 10, 0.001), _cand(0, 1, "accepted"),
                   _llm(1, 1, 100, 0, 10, 0.001), _cand(1, 1, "unmeasured")])
    assert s["per_kernel_basis"] == "accepted" and s["tokens_per_kernel"] == 220


def test_an_empty_ledger_has_no_per_kernel_figures():
    s = summarize([])
    assert s["requests"] == 0 and s["tokens_per_kernel"] is None and s["cache_hit_rate"] is None


def test_every_failed_first_attempt_counts_though_each_was_fixed_on_turn_2():
    """Issue 18's run: 4 conversations, each incorrect on turn 1 and fixed on turn 2. Per conversation nothing
    failed; per attempt the four first turns (and their judging time) are what went to failures."""
    records = []
    for i in range(4):
        records += [_llm(i, 1, 1000, 0, 500, 0.010), {**_cand(i, 1, "incorrect"), "llm_latency_s": 2.0,
                                                      "verdict": {"duration_s": 8.0}},
                    _llm(i, 2, 1700, 1000, 600, 0.012), {**_cand(i, 2, "unmeasured"), "llm_latency_s": 3.0,
                                                         "verdict": {"duration_s": 12.0}}]
    s = summarize(records)
    assert s["failed_candidates"] == 0 and s["failed_attempts"] == 4
    assert s["failed_token_share"] == pytest.approx(1500 / (1500 + 2300), abs=1e-4)  # 39.5%, not 0%
    assert s["failed_wall_share"] == pytest.approx(10 / 25, abs=1e-4)
    assert s["failed_dollar_share"] == pytest.approx(0.010 / 0.022, abs=1e-4)


def test_the_run_summary_never_rounds_a_share_up_across_a_goal():
    from autotune.run.loop import accounting_line
    from autotune.text import pct

    assert pct(0.847) == "84.7%" and pct(0.8499) == "84.9%" and pct(0.29) == "29.0%" and pct(1.0) == "100.0%"
    line = accounting_line("openai", {**summarize([_llm(0, 1, 1000, 0, 10, 0.0)]), "cache_hit_rate": 0.8496})
    assert "84.9% of prompt tokens cached" in line and "85" not in line.split("cached")[0]


def test_tokens_at_no_cost_say_the_prices_are_unset_instead_of_printing_zero_dollars():
    from autotune.run.loop import accounting_line

    unpriced = accounting_line("openai", summarize([_llm(0, 1, 1000, 0, 10, 0.0), _cand(0, 1, "unmeasured")]))
    assert "dollars not counted (agent.price is not set)" in unpriced and "$" not in unpriced, unpriced
    priced = accounting_line("openai", summarize([_llm(0, 1, 1000, 0, 10, 0.0123), _cand(0, 1, "unmeasured")]))
    assert "$0.0123" in priced and "not set" not in priced, priced
    search = accounting_line("search", summarize([_cand(0, 1, "unmeasured")]))  # no LLM, nothing to price
    assert "0 tokens;" in search and "$" not in search and "not set" not in search, search
