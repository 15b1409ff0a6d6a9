"""The agent stage: turns a hot spot into candidate kernels, with the cost of every one.

    from autotune.agent import search_target, summarize
    result = search_target(targets.get("rms_norm"), hotspot, cfg, run_dir, ledger)
    result.best            # the best CandidateRecord (accepted > unmeasured > slower, then speedup)
    summarize(ledger.read())   # tokens and dollars per kernel, failed share, prompt cache hit rate

`agent=openai` talks to any OpenAI-compatible endpoint, `agent=replay` answers from a recorded
transcript, `agent=search` writes candidates from templates without an LLM (conf/agent/). The loop
is in loop.py, messages in prompts.py and prompts/, clients and the transcript in clients.py, code
extraction in extract.py, accounting in accounting.py, the records in records.py.
"""

from autotune.agent.accounting import summarize
from autotune.agent.loop import search_target
from autotune.agent.records import NO_CODE, CandidateRecord, TargetSearch

__all__ = ["CandidateRecord", "TargetSearch", "NO_CODE", "search_target", "summarize"]
