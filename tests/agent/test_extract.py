"""Taking the candidate file out of LLM replies as models really write them."""

from autotune.agent.extract import extract

FILE = "import torch\nimport triton\n\n\ndef rms_norm(x, weight, eps):\n    return x\n"


def test_takes_the_block_that_defines_the_entry_function():
    reply = ("Plan first:\n```\npip install triton\n```\nA helper:\n```python\ndef helper():\n    pass\n```\n"
             f"The file:\n```python\n{FILE}```\nDone.")
    assert extract(reply, "rms_norm").code == FILE


def test_the_last_complete_definition_wins_and_think_sections_are_ignored():
    draft = FILE.replace("return x", "return None")
    reply = f"<think>\n```python\n{draft}```\n</think>\nFirst try:\n```py\n{draft}```\nBetter:\n~~~python\n{FILE}~~~\n"
    assert extract(reply, "rms_norm").code == FILE


def test_a_reply_cut_off_inside_its_block_gives_no_code_and_says_why():
    result = extract(f"```python\n{FILE[:60]}", "rms_norm")
    assert result.code is None and "cut off" in result.reason


def test_a_reply_without_the_entry_function_names_it():
    result = extract("```python\ndef rmsnorm(x, w, eps):\n    pass\n```", "rms_norm")
    assert result.code is None and "def rms_norm(" in result.reason


def test_a_reply_without_any_fence_says_so_unless_it_is_a_bare_file():
    assert "no fenced code block" in extract("I cannot help with that.", "rms_norm").reason
    assert extract(FILE, "rms_norm").code == FILE
