"""Taking the candidate file out of an LLM reply.

Models answer with prose around one or more fenced code blocks, sometimes after a `<think>` section,
sometimes cut off by max_tokens. The candidate is the last complete fenced block that defines the
entry function (`def rms_norm(`); a reply without one gives no code and a reason that goes back to the
model as feedback, so that the next turn can fix the format.
"""

from __future__ import annotations

import dataclasses
import re

# An opening fence (``` or ~~~, 3 or more) with an optional info string, at the start of a line.
_FENCE = re.compile(r"^(?P<indent>[ \t]{0,3})(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$", re.MULTILINE)
_THINK = re.compile(r"<think>.*?(</think>|\Z)", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class Extraction:
    code: str | None  # the whole candidate file, or None when the reply has no usable code
    reason: str  # why no code was usable ("" when code is set)


@dataclasses.dataclass(frozen=True)
class _Block:
    info: str
    body: str
    closed: bool


def extract(reply: str, entry: str) -> Extraction:
    """The candidate file in `reply`: the last complete fenced block that defines `def <entry>(`."""
    text = _THINK.sub("", reply or "")
    blocks = _blocks(text)
    defines = re.compile(rf"^\s*def\s+{re.escape(entry)}\s*\(", re.MULTILINE)
    complete = [b for b in blocks if b.closed and defines.search(b.body)]
    if complete:
        return Extraction(complete[-1].body.strip("\n") + "\n", "")
    if any(not b.closed and defines.search(b.body) for b in blocks):
        return Extraction(None, "the reply ends inside its code block (cut off, probably by max_tokens): "
                                "send the whole file again, shorter, in one fenced python block")
    if not blocks and defines.search(text) and "import triton" in text:
        return Extraction(text.strip("\n") + "\n", "")  # a bare file with no fences at all
    if not blocks:
        return Extraction(None, "the reply has no fenced code block: answer with the whole file in one "
                                "```python block")
    return Extraction(None, f"no fenced code block in the reply defines `def {entry}(`: the file's entry "
                            f"function must be named {entry}")


def _blocks(text: str) -> list[_Block]:
    """Fenced blocks in order; a fence closes on a line of the same character at least as long."""
    blocks: list[_Block] = []
    pos = 0
    while True:
        m = _FENCE.search(text, pos)
        if not m:
            return blocks
        fence = m.group("fence")
        close = re.compile(rf"^[ \t]{{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.MULTILINE)
        start = m.end() + 1
        end = close.search(text, start)
        if end is None:
            blocks.append(_Block(m.group("info").strip(), text[start:], closed=False))
            return blocks
        blocks.append(_Block(m.group("info").strip(), text[start:end.start()], closed=True))
        pos = end.end()
