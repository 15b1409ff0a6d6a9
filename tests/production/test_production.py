"""Issue 27, section 6: production Triton kernels, taken at test time from their wheels (tests/production/ports.py),
are accepted by the checker in the dtypes the served models use (every preset serves bfloat16; the tiny
models float32). Run in CI's stage after the suite: `pytest tests/production -m production`."""

import time

import pytest

from autotune.config import compose
from autotune.targets import NAMES
from autotune.verify import verify
from autotune.verify.verdict import Status
from tests.production.ports import PORTS
from tests.production.ports_attention import ATTENTION_PORTS
from tests.production.ports_gemm import GEMM_PORTS
from tests.production.wheels import licence, take

SERVED_DTYPES = "verify.dtypes=[bfloat16,float32]"

# Ports the checker does not accept yet, each with what was found (stop 36; the closing note has the verdicts). Kept
# out of the stage until each is settled, and named here so that none is forgotten.
NOT_YET = {
    # accepted in bf16 (46 of 46 cases, 350 s on the shared machine), its served-size launches (vLLM's default config
    # from 2048 tokens, FlagGems' token sort with the token count as constexprs) run by probes: too slow for the stage
    "vllm/fused_moe_kernel": "fused_moe: accepted, 350 s to judge in bf16 alone",
    # SGLang's per-token quant rounds by libdevice.round, ties half away from zero; the contract (torch.round) and
    # vLLM's op (cvt.rni) round half to even: bf16 rows of large values are full of exact ties, and 6 of 2048 int8
    # values were off by one, over the 0.1% the contract allows for summation-order flips
    "flag_gems+sglang/fused_add_rms_norm_per_token_quant_int8": "fused_add_rms_norm_quant: ties rounded away from 0",
    # right: vLLM's MHA stage 1 sums q * k in bf16 (tl.sum keeps the dtype); SGLang's copy casts to fp32 first
    "vllm/decode_attention": "decode_attention: bf16 partial sums, 3x the reference's error (a real precision loss)",
    # accepted (73 of 73 cases, 396 s on the shared machine): decode's batch x context case (64 sequences of up to
    # 4096 positions) runs whole, its stage 1 reading kv_indptr entries only skipped programs would have written
    # (a tainted program's address was first refused as out of bounds; the sample is abandoned now): too slow here
    "sglang/decode_attention": "decode_attention: accepted, 396 s to judge",
    # accepted (58 of 58 cases), but 514 s on the shared machine: too slow for CI's stage as it is
    "vllm/unified_attention-prefill": "prefill_attention: accepted, 514 s to judge",
}
STAGE = PORTS + tuple(p for p in GEMM_PORTS + ATTENTION_PORTS if p.name not in NOT_YET)


@pytest.mark.production
@pytest.mark.parametrize("port", STAGE, ids=[p.name for p in STAGE])
def test_a_production_kernel_is_accepted(port, tmp_path):
    path = tmp_path / f"{port.name.replace('/', '_')}.py"
    path.write_text(port.candidate())
    start = time.monotonic()
    v = verify(port.target, path, compose(["verify=quick", SERVED_DTYPES]))
    print(f"\n{port.name} | {port.source} | {licence(port.source)} | {port.target} | {v.status.value} | "
          f"{len(v.cases)} cases | {time.monotonic() - start:.0f} s")
    assert v.status is Status.UNMEASURED, v.reason
    assert v.cases and all(c.passed for c in v.cases)


def test_every_port_has_a_unique_name_and_each_left_out_is_one():
    ported = PORTS + GEMM_PORTS + ATTENTION_PORTS
    names = [p.name for p in ported]
    assert len(names) == len(set(names)) and set(NOT_YET) <= set(names)
    assert {p.target for p in ported} == set(NAMES) and len(ported) >= 20  # every target has a production port
    assert len(STAGE) >= 16 and len(NOT_YET) <= 5


def test_a_port_takes_definitions_verbatim_and_names_what_is_missing():
    text = "import x\n\n\n@deco(1)\ndef f(a):\n    return a  # kept\n\n\nC: int = 3\nD = 4\n"
    assert take(text, ("C", "f")) == "@deco(1)\ndef f(a):\n    return a  # kept\n\n\nC: int = 3"
    with pytest.raises(KeyError, match="defines no \\['g'\\]"):
        take(text, ("f", "g"), "the module")
    wrapped = "@libentry()\n@libtuner(\n    configs=[],\n)\n@triton.jit(do_not_specialize=['eps'])\ndef k(x):\n    pass\n"
    assert take(wrapped, ("k",), from_jit=True) == "@triton.jit(do_not_specialize=['eps'])\ndef k(x):\n    pass"
    assert take(wrapped, ("k",)).startswith("@libentry()")
