"""The search baseline's templates: legal files and correct kernels (each target's example kernel is judged in
tests/verify/test_correct.py).

- Every rendered configuration of every target parses and passes the checker's static policy scan.
- The first configuration of every target passes the real checker on CPU
  (status unmeasured) with its default case plan: every dtype, input kind and edge width (ragged widths,
  widths above 4096), 5-10 s a file.
- Every configuration is correct on small shapes that take each code path (ragged widths, rows wider
  than the block, row counts that leave a program's tile part-empty), run in one child process under the
  Triton interpreter and judged by the checker's own comparison.

Run: pytest tests/agent/test_search.py (about 40 s for the row-wise targets on 2 cores with -n 2; the
attention and GEMM targets several minutes more on 2 busy cores).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune import targets
from autotune.agent import search
from autotune.config import compose
from autotune.errors import UserError
from autotune.verify import policy, verify
from autotune.verify.verdict import Status

# the defaults' shapes, not whatever profile is lying around; the quick plan (every dtype, kind, layout and width,
# fewer rows: each target's example kernel passes the full default plan in tests/verify/test_correct.py)
CHECKER = ["device=cpu", "verify.shapes=default", "verify=quick"]


@pytest.fixture(scope="module")
def cfg():
    return compose(CHECKER)


@pytest.mark.parametrize("name", targets.NAMES)
def test_first_candidate_passes_the_checker(name, cfg):
    label, source = search.candidates(name, 1)[0]
    verdict = verify(name, source, cfg)
    assert verdict.status is Status.UNMEASURED, f"{name} {label}: {verdict.reason}"
    assert {c.dtype for c in verdict.cases} == {"float32", "bfloat16", "float16"}
    assert {c.kind for c in verdict.cases} >= {"normal", "special"}
    if name in ("rms_norm", "fused_add_rms_norm", "softmax", "silu_and_mul"):  # the chunked path (several
        # programs per row for silu_and_mul) ran
        assert max(c.shape[-1] for c in verdict.cases) > 4096


@pytest.mark.parametrize("name", targets.NAMES)
def test_every_candidate_is_a_legal_file(name):
    target = targets.get(name)
    rendered = search.candidates(name, len(search.search_space(name)))
    assert len(rendered) == len(search.search_space(name)) >= 6
    for label, source in rendered:
        tree = policy.parse(source, filename=f"{name} {label}")
        assert policy.scan(tree, target) == [], f"{name} {label}"
        assert label in ast.get_docstring(tree)
        entry = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
        assert tuple(a.arg for a in entry.args.args) == target.arg_names


def test_search_space_is_ordered_and_labelled():
    first = search.search_space("rms_norm")[0]
    assert first == {"max_block": 4096, "rows": 1, "warps": "auto"}
    assert search.label("rms_norm", first) == "max_block=4096,rows=1,warps=auto"
    labels = [label for label, _ in search.candidates("silu_and_mul", 3)]
    assert labels == [search.label("silu_and_mul", p) for p in search.search_space("silu_and_mul")[:3]]
    for name in targets.NAMES:
        space = search.search_space(name)
        assert len({search.label(name, p) for p in space}) == len(space)  # no configuration twice
    assert len(search.candidates("softmax", 1000)) == len(search.search_space("softmax"))


def test_fixed_and_automatic_warps_render_differently():
    fixed = search.render("softmax", {"max_block": 1024, "rows": 4, "warps": 8})
    auto = search.render("softmax", {"max_block": 1024, "rows": 4, "warps": "auto"})
    assert "NUM_WARPS = 8" in fixed and "num_warps=NUM_WARPS" in fixed and "_num_warps" not in fixed
    assert "def _num_warps(" in auto and "NUM_WARPS =" not in auto
    assert "MAX_BLOCK = 1024" in fixed and "ROWS = 4" in fixed
    assert "\n\n\n\n" not in fixed + auto


@pytest.mark.parametrize("call, words", [
    (lambda: search.candidates("matmul", 1), ["matmul", "rms_norm"]),
    (lambda: search.render("matmul", {}), ["matmul", "rms_norm"]),
    (lambda: search.label("rms_norm", {"max_block": 4096}), ["missing ['rows', 'warps']"]),
    (lambda: search.candidates("rms_norm", 0), ["0 candidates", "at least 1"]),
    (lambda: search.render("rms_norm", {"max_block": 4096, "rows": 1}), ["missing ['warps']"]),
    (lambda: search.render("rms_norm", {"max_block": 4096, "rows": 1, "warps": 4, "stages": 2}),
     ["unknown ['stages']"]),
    (lambda: search.render("rms_norm", {"max_block": 1000, "rows": 1, "warps": 4}), ["max_block=1000", "4096"]),
    (lambda: search.render("silu_and_mul", {"block": 1024, "warps": True}), ["warps=True"]),
    (lambda: search.render("softmax", {"max_block": 16384, "rows": 2, "warps": 4}), ["32768", "16384"]),
])
def test_bad_requests_are_user_errors(call, words):
    with pytest.raises(UserError) as e:
        call()
    message = str(e.value)
    assert "\n" not in message and all(w in message for w in words), message


# one child per group, each within its own time limit: the attention and GEMM templates' configurations
# cost the interpreter more than all the row-wise ones together
SWEEP_GROUPS = [("rms_norm", "silu_and_mul", "fused_add_rms_norm", "rotary_embedding", "softmax"),
                ("fused_add_rms_norm_quant",),
                ("decode_attention",), ("prefill_attention",), ("linear",), ("int8_linear",), ("fused_moe",),
                ("paged_attention",)]


def test_sweep_groups_cover_every_target():
    assert sorted(n for g in SWEEP_GROUPS for n in g) == sorted(targets.NAMES)


@pytest.mark.parametrize("names", SWEEP_GROUPS, ids=[g[0] if len(g) == 1 else "row-wise" for g in SWEEP_GROUPS])
def test_every_configuration_is_correct_on_every_code_path(tmp_path, names):
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, __file__, str(tmp_path), *names], env=env, capture_output=True,
                          text=True, timeout=480)  # 137 s for prefill_attention alone on 2 busy cores
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["failures"] == []
    assert report["configurations"] == sum(len(search.search_space(n)) for n in names)


# --- the child process of the last test: every configuration, in the interpreter ---------------------------

# fp32, and bf16 (which the interpreter emulates); fp16 takes the same code and is in the checker runs above
SWEEP_DTYPES = ("float32", "bfloat16")

def _sweep_shapes(name: str, params: dict) -> list[tuple[int, ...]]:
    """Shapes that take every path of this configuration, small enough for the interpreter."""
    if name == "silu_and_mul":
        return [(2, 3, 2 * (params["block"] + 37))]  # two programs per row, the second part-empty
    if name == "decode_attention":  # contexts over two key blocks (splits part-empty), ragged head_dim 48
        return [(2, 4, 2, 48, params["block_n"] + 5)]
    if name == "prefill_attention":  # over two query or key blocks, the last ragged; ragged head_dim 48
        return [(2, 4, 2, 48, max(params["block_m"], params["block_n"]) + 3)]
    if name == "fused_moe":  # 2 experts, both on every token: each expert's sorted rows over two row blocks, the last
        # part-empty; hidden and intermediate over two column and two reduction blocks, ragged
        wide = max(params["block_n"], params["block_k"])
        return [(params["block_m"] + 3, 2, 2, wide + 7, wide + 5)]
    if name == "paged_attention":  # a prefill over two query blocks, contexts over two key tiles, ragged head_dim 48
        return [(3, 8, 2, 48, 16, 2 * max(params["block_q"], 4) + 1, 2 * params["tile"] + 5)]
    if name in ("linear", "int8_linear"):  # ragged M, N and K tiles; K over two blocks and every split
        return [(params["block_m"] + 3, params["block_n"] + 5, params["block_k"] * params["split_k"] + 7)]
    if name == "rotary_embedding":
        return [(3, params["heads"] + 3, 96), (2, 1, 32)]  # a part-empty head tile; half-widths 48 and 16
    # narrow ragged rows (with leading dims, a row count that is not a multiple of ROWS), then rows wider
    # than the block: the chunked loop runs twice, the second chunk ragged
    return [(2, 3, 1000), (2, params["max_block"] + 37)]


def _softmax_special_rows(width: int, block: int, dtype):
    """All -inf (NaN out), NaN in the first lane, -inf across the first block, +inf at the end."""
    import torch

    x = torch.randn(4, width)
    x[0] = float("-inf")
    x[1, 0] = float("nan")
    x[2, :block] = float("-inf")
    x[3, -1] = float("inf")
    return (x.to(dtype),)


def _inputs(target, shape, params, dtype):
    import torch

    for kind in ("normal", "special"):
        yield kind, target.make_inputs(shape, dtype, torch.Generator().manual_seed(0), kind)
    if target.name == "softmax":
        yield "edge rows", _softmax_special_rows(shape[-1], min(params["max_block"], shape[-1]), dtype)


def _run_configuration(name: str, params: dict, workdir: Path) -> list[str]:
    import torch

    from autotune.verify.cases import answers, as_tuple
    from autotune.verify.compare import compare_all

    target, label = targets.get(name), search.label(name, params)
    path = workdir / f"{name}_{label.replace(',', '_').replace('=', '')}.py"
    path.write_text(search.render(name, params))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    failures = []
    for shape in _sweep_shapes(name, params):
        for dtype in (getattr(torch, d) for d in SWEEP_DTYPES):
            for kind, args in _inputs(target, shape, params, dtype):
                refs, goldens = answers(target, args)
                check = compare_all(as_tuple(getattr(module, name)(*args)), refs, goldens, target.tolerances[dtype])
                if not check.passed:
                    failures.append(f"{name} {label} {list(shape)} {dtype} {kind}: {check.note}")
    return failures


def _sweep(workdir: Path, names: list[str]) -> None:
    import torch

    # tiny tensors: one thread is 3x faster than torch's pool when pytest -n 2 already fills both cores
    # (measured: three softmax configurations, 2.0 s against 5.7 s)
    torch.set_num_threads(1)
    from autotune.verify import interp

    interp.round_bf16_like_gpu()  # as the checker's worker does: fp32 -> bf16 rounded as on a GPU
    failures, count = [], 0
    for name in names:
        for params in search.search_space(name):
            failures += _run_configuration(name, params, workdir)
            count += 1
    print(json.dumps({"configurations": count, "failures": failures}))


if __name__ == "__main__":
    _sweep(Path(sys.argv[1]), sys.argv[2:])
