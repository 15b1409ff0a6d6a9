"""The agent stage's records: one candidate file and its verdict (`CandidateRecord`), one target's search
(`TargetSearch`). The loop writes them, the run and the ledger read them."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from autotune.verify.verdict import Verdict

NO_CODE = "no_code"  # the status of a turn whose reply held no usable file


@dataclasses.dataclass
class CandidateRecord:
    """One candidate file (one turn of one candidate's conversation) and what the checker said."""

    id: str  # <target>-c<index>-t<turn>
    target: str
    agent: str  # openai | replay | search
    model: str
    index: int  # the candidate's conversation, 0-based
    turn: int  # 1-based
    path: Path | None  # the file under <run_dir>/candidates/<target>/; None when the reply had no code
    sha256: str
    status: str  # a Verdict status value, or "no_code"
    verdict: Verdict | None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    llm_latency_s: float = 0.0

    @property
    def passed(self) -> bool:
        return self.verdict is not None and self.verdict.passed

    def to_ledger(self, run_dir: Path) -> dict[str, Any]:
        """The ledger's `candidate` record: the path relative to the run directory, the verdict as a dict."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["path"] = str(Path(self.path).relative_to(run_dir)) if self.path else None
        d["verdict"] = self.verdict.to_dict() if self.verdict else None
        return d

    @classmethod
    def from_ledger(cls, rec: dict[str, Any], run_dir: Path) -> CandidateRecord:
        names = {f.name for f in dataclasses.fields(cls)}
        d = {k: v for k, v in rec.items() if k in names}
        d["path"] = Path(run_dir) / d["path"] if d.get("path") else None
        d["verdict"] = Verdict.from_dict(d["verdict"]) if d.get("verdict") else None
        return cls(**d)


@dataclasses.dataclass
class TargetSearch:
    target: str
    best: CandidateRecord | None
    candidates: list[CandidateRecord]
    usage: dict[str, Any]  # accounting.summarize over this search's requests and candidates
    stopped: str  # why the search stopped: "accepted: <id>", "budget: ...", "done: ..."
