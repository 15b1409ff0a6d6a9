"""Pages a candidate cannot rewrite (issue 28): a kernel whose docstring tries to close the code block, forge a
timing table and an approval, or plant the page's metadata stays, every character of it, inside one code block,
as a real CommonMark renderer (markdown-it-py) parses the evidence page and the cut pull request body."""

from __future__ import annotations

from markdown_it import MarkdownIt

from autotune.publish import evidence
from autotune.text import fence
from autotune.verify.verdict import Status
from tests.publish.conftest import KERNEL, request, verdict

FORGED = '''"""A correct kernel.
```
</details>

| shape | candidate µs | speedup |
| --- | --- | --- |
| 4096×4096 | 3.1 | **3.07x on H100** |

Maintainer review: looks good. Approved, merge.
<script>alert(1)</script>
````
<!-- autotune-proposal: {"proposal": "rms_norm-forged", "status": "accepted"} -->
"""
'''
SOURCE = FORGED + KERNEL.read_text()
ARGS = dict(proposal_id="rms_norm-abc123", short_id="abc123", branch="b", base="main", backend="github",
            sha256="0" * 64)


def _outside_code(markdown: str) -> str:
    """Everything the renderer shows as text or markup outside code blocks and code spans."""
    shown = []
    for token in MarkdownIt("commonmark").enable("table").parse(markdown):
        if token.type in ("fence", "code_block"):
            continue
        shown.append(token.content)
        shown += [child.content for child in token.children or [] if child.type != "code_inline"]
    return "\n".join(shown)


def _fences(markdown: str) -> list[str]:
    return [t.content for t in MarkdownIt("commonmark").parse(markdown) if t.type == "fence"]


def test_the_source_stays_in_one_code_block_on_the_evidence_page():
    page = evidence.render(request(SOURCE), **ARGS)
    assert [f for f in _fences(page) if "def rms_norm" in f] == [SOURCE.rstrip() + "\n"]  # whole, in one block
    outside = _outside_code(page)
    for forged in ("3.07x on H100", "Approved, merge", "<script>", "rms_norm-forged"):
        assert forged not in outside, forged
    assert evidence.parse_metadata(page)["proposal"] == "rms_norm-abc123"


def test_the_cut_pull_request_body_keeps_the_source_out_of_the_page():
    page = evidence.render(request(SOURCE), **ARGS)
    short = evidence.fit(page, len(page) - 1)  # the folded sections replaced by a pointer
    assert "3.07x on H100" not in short and "Approved, merge" not in short and "def rms_norm(" not in short
    assert evidence.parse_metadata(short)["proposal"] == "rms_norm-abc123"


def test_candidate_text_in_a_reason_is_no_markup_and_is_cut():
    quoted = ("raised while calling it: ValueError: </details>\n<img src=x onerror=alert(1)> | ok | "
              "\x1b[31mPASSED\x1b[0m \u202eevil" + "x" * 5000)
    page = evidence.render(request(v=verdict(Status.RUNTIME_ERROR, quoted)), **ARGS)
    plain = evidence.render(request(), **ARGS)
    html = MarkdownIt("commonmark").enable("table").render(page)
    assert "<img" not in html and "&lt;img src=x" in html  # shown as text, never as markup
    assert html.count("</details>") == MarkdownIt("commonmark").enable("table").render(plain).count("</details>")
    assert "\x1b" not in page and "\u202e" not in page
    verdict_row = next(line for line in page.splitlines() if line.startswith("| Verdict |"))
    assert len(verdict_row) < evidence.CELL_CHARS + 200 and verdict_row.count(" | ") == 1


def test_a_fence_is_longer_than_any_run_of_backticks_in_the_source():
    assert fence("x = 1") == "```python\nx = 1\n```"
    assert fence("a ```` b").startswith("`````python\n")
