"""Issue 27, section 6: production Triton kernels, taken at test time from their wheels (tests/production/ports.py),
are accepted by the checker in the dtypes the served models use (every preset serves bfloat16; the tiny
models float32). Run in CI's stage after the suite: `pytest tests/production -m production`."""

import time

import pytest

from autotune.config import compose
from autotune.verify import verify
from autotune.verify.verdict import Status
from tests.production.ports import PORTS
from tests.production.wheels import licence, take

SERVED_DTYPES = "verify.dtypes=[bfloat16,float32]"


@pytest.mark.production
@pytest.mark.parametrize("port", PORTS, ids=[p.name for p in PORTS])
def test_a_production_kernel_is_accepted(port, tmp_path):
    path = tmp_path / f"{port.name.replace('/', '_')}.py"
    path.write_text(port.candidate())
    start = time.monotonic()
    v = verify(port.target, path, compose(["verify=quick", SERVED_DTYPES]))
    print(f"\n{port.name} | {port.source} | {licence(port.source)} | {port.target} | {v.status.value} | "
          f"{len(v.cases)} cases | {time.monotonic() - start:.0f} s")
    assert v.status is Status.UNMEASURED, v.reason
    assert v.cases and all(c.passed for c in v.cases)


def test_a_port_takes_definitions_verbatim_and_names_what_is_missing():
    text = "import x\n\n\n@deco(1)\ndef f(a):\n    return a  # kept\n\n\nC: int = 3\nD = 4\n"
    assert take(text, ("C", "f")) == "@deco(1)\ndef f(a):\n    return a  # kept\n\n\nC: int = 3"
    with pytest.raises(KeyError, match="defines no \\['g'\\]"):
        take(text, ("f", "g"), "the module")
    wrapped = "@libentry()\n@libtuner(\n    configs=[],\n)\n@triton.jit(do_not_specialize=['eps'])\ndef k(x):\n    pass\n"
    assert take(wrapped, ("k",), from_jit=True) == "@triton.jit(do_not_specialize=['eps'])\ndef k(x):\n    pass"
    assert take(wrapped, ("k",)).startswith("@libentry()")
