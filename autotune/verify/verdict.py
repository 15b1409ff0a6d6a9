"""The Verdict: what the checker concluded about one candidate, and all the evidence for it.

It is a plain record (dataclasses + a string enum) so that the ledger, the agent's feedback prompt,
the PR evidence and `autotune verify --json` all read the same thing. Anything not proven correct is
never ACCEPTED or UNMEASURED.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from typing import Any

STDERR_TAIL_CHARS = 3000  # what a failing verdict keeps of the candidate's stderr
MAX_FINDINGS, FINDING_CHARS = 100, 500  # what it keeps of the static scan's findings (they quote the source)
MASK = "[masked]"
# What looks like a secret. The candidate cannot see the parent's environment or other processes where the
# sandbox applied its namespaces; this is the last line, for the text it does hand back (stderr, errors).
_TOKENS = re.compile(
    r"\b(?:sk-[A-Za-z0-9_-]{8,}"  # OpenAI / Anthropic-style API keys (sk-..., sk-proj-..., sk-ant-...)
    r"|gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,}"  # GitHub tokens
    r"|hf_[A-Za-z0-9]{16,}|xox[abprs]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}"  # Hugging Face, Slack, AWS
    r"|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})")  # JWTs
# A name that ends in one of these words (api_key, GITHUB_TOKEN, --api-key, DB_PASSWORD; not max_tokens, keyword)
_SECRET_NAME = r"[A-Za-z0-9_.-]{0,64}?(?:key|token|secret|passw(?:or)?d|credentials?)(?![A-Za-z0-9_.-])"
# `--api-key=v`, `--token v` (NUL-separated as in /proc/<pid>/cmdline too), `OPENAI_API_KEY=v`, `"api_key": "v"`
_FLAG = re.compile(rf"(--?{_SECRET_NAME})([=\s\x00]+)([^\s\x00]+)", re.IGNORECASE)
_ASSIGNMENT = re.compile(rf"(\b{_SECRET_NAME}['\"]?\s*[=:]\s*)(['\"]?)([^\s'\",\x00]+)", re.IGNORECASE)
_BEARER = re.compile(r"(\bBearer\s+)([A-Za-z0-9._~+/=-]{8,})")


CANDIDATE_TEXT_CHARS = 300  # what a reason shows of one message the candidate's processes wrote
# Characters a reader does not see as written: control characters but tab, line feed, carriage return and form
# feed (terminal escapes among them), line and paragraph separators, bidirectional overrides and isolates,
# zero-width characters. One class for every place that refuses or strips them (a source, a reason, a page's cell).
INVISIBLE = "\x00-\x08\x0b\x0e-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff"
_UNPRINTABLE = re.compile(f"[\t\n\r\x0c{INVISIBLE}]")  # and the line breaks: a reason is one line
# Markup and quotation marks, as look-alikes: no HTML, table cell or closing quote of ours (a page escapes the
# rest for its own format: publish.evidence's `cell`, report.html's autoescape; a code span stays inside the quote).
_MARKUP = str.maketrans({"<": "‹", ">": "›", "|": "¦", '"': "'", "“": "'", "”": "'"})


def plain(text: str, limit: int = CANDIDATE_TEXT_CHARS) -> str:
    """Text the candidate's processes wrote, as one line of a reason: no control characters or markup, cut."""
    flat = " ".join(_UNPRINTABLE.sub(" ", text).split()).translate(_MARKUP)
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


def quoted(text: str, limit: int = CANDIDATE_TEXT_CHARS) -> str:
    """`plain(text)` in quotation marks it cannot close: a message of the candidate's processes never reads as the
    checker's own words."""
    return f"“{plain(text, limit)}”"


def printable_lines(text: str) -> str:
    """Several lines the candidate's processes wrote (its stderr): no control characters but the line breaks."""
    return "\n".join(_UNPRINTABLE.sub(" ", line).rstrip() for line in text.splitlines())


def mask_secrets(text: str) -> str:
    """`text` with anything that looks like a secret (API keys, tokens, the values of `--api-key=...` arguments
    and of `NAME=value` for names with KEY, TOKEN, SECRET or PASSWORD in them) replaced by [masked]."""
    text = _TOKENS.sub(MASK, text)
    text = _BEARER.sub(lambda m: m.group(1) + MASK, text)
    text = _FLAG.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    return _ASSIGNMENT.sub(lambda m: m.group(1) + m.group(2) + MASK, text)


class Status(str, enum.Enum):
    """A verdict's status, and the one place that says what each status means to everything downstream (the
    run's summary and progress, the report, the registry, `autotune regress`, the GPU self-check). A str enum:
    `"slower" in Status.correct_set()` holds for a status read back from a ledger as text."""

    ACCEPTED = "accepted"  # correct and measurably faster than the best baseline
    UNMEASURED = "unmeasured"  # correct; no GPU to time it
    SLOWER = "slower"  # correct but not faster than the best baseline beyond the noise margin
    INCORRECT = "incorrect"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    POLICY_VIOLATION = "policy_violation"

    @property
    def correct(self) -> bool:
        """Proven correct on every case, whatever its speed: accepted, unmeasured, slower."""
        return self in (Status.ACCEPTED, Status.UNMEASURED, Status.SLOWER)

    @property
    def passed(self) -> bool:
        """Correct, and faster or not measurable here: `autotune verify` exits 0, a run may propose it, the served
        model may use it (accepted, unmeasured). `slower` is correct and does not pass."""
        return self in (Status.ACCEPTED, Status.UNMEASURED)

    @property
    def timed(self) -> bool:
        """Correct and timed on a GPU (accepted, slower): what a correct kernel gets where it can be timed."""
        return self in (Status.ACCEPTED, Status.SLOWER)

    @property
    def crashed(self) -> bool:
        """The candidate did not run to an answer (compile error, runtime error, timeout)."""
        return self in (Status.COMPILE_ERROR, Status.RUNTIME_ERROR, Status.TIMEOUT)

    @classmethod
    def parse(cls, value: object) -> Status | None:
        """The Status a ledger's text names, or None for anything else ("no_code", a missing field)."""
        try:
            return cls(value)
        except ValueError:
            return None

    @classmethod
    def correct_set(cls) -> frozenset[Status]:
        return frozenset(s for s in cls if s.correct)

    @classmethod
    def passed_set(cls) -> frozenset[Status]:
        return frozenset(s for s in cls if s.passed)

    @classmethod
    def timed_set(cls) -> frozenset[Status]:
        return frozenset(s for s in cls if s.timed)

    def __str__(self) -> str:  # the value in f-strings and tables, on every Python version
        return self.value


def is_correct(status: object) -> bool:
    """For a status as text (ledger, provenance.json): see Status.correct; False for no status."""
    s = Status.parse(status)
    return bool(s and s.correct)


def is_passed(status: object) -> bool:
    """For a status as text: see Status.passed; False for no status ("no_code")."""
    s = Status.parse(status)
    return bool(s and s.passed)


@dataclasses.dataclass
class CaseResult:
    """One correctness case: a shape x dtype x input kind x seed."""

    shape: list[int]
    dtype: str
    kind: str  # normal | large | special
    seed: int
    passed: bool
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    rtol: float | None = None
    atol: float | None = None
    evidence: bool = True  # False when the reference output is degenerate (constant, all zero)
    source: str = "edge"  # profile | default | edge | model | random
    layout: str = "contiguous"  # how the inputs sat in memory (targets.base.LAYOUTS)
    scalars: dict[str, float] = dataclasses.field(default_factory=dict)  # scalar arguments set by the case (eps)
    note: str = ""  # why it failed, or why it does not count
    seconds: float | None = None  # wall clock from the device starting the case to the judge having compared it


@dataclasses.dataclass
class ShapeTiming:
    """GPU timing of one shape and dtype; times are medians over repetitions, in microseconds."""

    shape: list[int]
    dtype: str
    candidate_us: float
    candidate_spread_us: float  # p80 - p20
    eager_us: float | None
    compile_us: float | None
    speedup: float | None  # best baseline / candidate
    floor_us: float | None  # the roofline floor: max(bytes moved / peak bandwidth, FLOPs / peak FLOP rate)
    pct_of_floor: float | None  # floor / candidate * 100: how close to the roofline
    calls: int = 0  # how often the served model made this call in the profile (the geomean weight)
    implausible: bool = False  # faster than the roofline floor allows
    bound: str | None = None  # which side of the roofline sets the floor: "memory" or "compute"


@dataclasses.dataclass
class Verdict:
    status: Status
    reason: str
    target: str
    candidate: str  # path of the file that was judged
    candidate_sha256: str = ""
    cases: list[CaseResult] = dataclasses.field(default_factory=list)
    timings: list[ShapeTiming] = dataclasses.field(default_factory=list)
    speedup_geomean: float | None = None  # weighted by the profile's call counts
    measured: bool = False  # timings come from a GPU
    nondeterministic: bool = False
    fp32_dots: list[str] = dataclasses.field(default_factory=list)  # fp32 tl.dot taken below IEEE (e.g. ["tf32"])
    policy: list[str] = dataclasses.field(default_factory=list)  # static-scan findings
    sandbox: dict[str, Any] = dataclasses.field(default_factory=dict)  # isolation that was applied
    stderr_tail: str = ""  # the candidate process's stderr, trimmed (compile errors, tracebacks)
    duration_s: float = 0.0
    environment: dict[str, Any] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)  # what the report must say (rows cut, ...)
    # the secret the case inputs and random sizes were drawn with; written after the candidate's process is gone
    inputs_salt: str = ""

    @property
    def passed(self) -> bool:
        return self.status.passed

    def seal(self) -> None:
        """Make the candidate-controlled text safe to store and show: a passing verdict keeps no stderr, a
        failing one a bounded tail without control characters; secrets are masked in it, in the reason (no control
        characters: it quotes the candidate's messages already, `quoted`) and in the policy findings (the first
        100, each without control characters and cut: they quote the source)."""
        tail = "" if self.status.passed else self.stderr_tail[-STDERR_TAIL_CHARS:]
        self.stderr_tail = mask_secrets(printable_lines(tail))
        self.reason = mask_secrets(_UNPRINTABLE.sub(" ", self.reason))
        self.policy = [mask_secrets(_UNPRINTABLE.sub(" ", p[:FINDING_CHARS])) for p in self.policy[:MAX_FINDINGS]]

    def failing_case(self) -> CaseResult | None:
        return next((c for c in self.cases if not c.passed), None)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["status"] = self.status.value
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verdict:
        d = dict(d)
        d["status"] = Status(d["status"])
        d["cases"] = [CaseResult(**c) for c in d.get("cases", [])]
        d["timings"] = [ShapeTiming(**t) for t in d.get("timings", [])]
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})
