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
from autotune.verify import verify
from autotune.verify.static import policy
from autotune.verify.verdict import Status

# The quick plan (every dtype, kind, layout and scalar value, the range cases; fewer rows) over a small served domain:
# the target's edge shapes as the served ones and the tiny models' sizes. A template's first candidate is judged at
# GPU-scale served shapes in every run that proposes it, and each target's example kernel at the defaults' and every
# preset's in tests/verify/test_correct.py (the fused MoE template here: 71 s at the defaults' shapes, 20 s so).
# verify.timeout_s bounds one case on 2 loaded cores (the suite's other worker judging beside it); a hang is caught.
CHECKER = ["device=cpu", "verify=quick", "verify.timeout_s=300", "verify.models=[tiny,tiny_moe]"]


def served(name: str) -> list[tuple]:
    return [(shape, "bfloat16", 1) for shape in targets.get(name).edge_shapes]


@pytest.fixture(scope="module")
def cfg():
    return compose(CHECKER)


@pytest.mark.parametrize("name", targets.NAMES)
def test_first_candidate_passes_the_checker(name, cfg):
    label, source = search.candidates(name, 1)[0]
    verdict = verify(name, source, cfg, shapes=served(name))
    assert verdict.status is Status.UNMEASURED, f"{name} {label}: {verdict.reason}"
    assert {c.dtype for c in verdict.cases} == {"float32", "bfloat16", "float16"}
    assert {c.kind for c in verdict.cases} >= {"normal", "special"}
    widest = max(s[-1] for s in targets.get(name).edge_shapes)
    if widest > 4096:  # a target with edge widths above 4096 (the chunked path of the row ops) ran one
        assert max(c.shape[-1] for c in verdict.cases) >= widest


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


# One child per group, each within its own time limit: a target whose search space says `own_sweep` (the
# attention and GEMM templates cost the interpreter more than all the row-wise ones together) has a child of its
# own; the others share one. Both come from the target modules, so a new target joins without a line here.
SHARED = tuple(n for n in targets.NAMES if not targets.get(n).search.own_sweep)
SWEEP_GROUPS = [SHARED] + [(n,) for n in targets.NAMES if targets.get(n).search.own_sweep]


def test_sweep_groups_cover_every_target():
    assert sorted(n for g in SWEEP_GROUPS for n in g) == sorted(targets.NAMES)


@pytest.fixture(scope="module")
def sweeps(request, tmp_path_factory):
    """A group's report, made once per group for the group's targets this session selected (`-k layer_norm`
    runs the shared child for layer_norm alone)."""
    selected = {item.callspec.params["name"] for item in request.session.items
                if item.originalname == "test_every_configuration_is_correct_on_every_code_path"}
    reports: dict[tuple, dict] = {}

    def report(name: str) -> dict:
        group = next(tuple(n for n in g if n in selected or n == name) for g in SWEEP_GROUPS if name in g)
        if group not in reports:
            env = {**os.environ, "TRITON_INTERPRET": "1"}
            done = subprocess.run([sys.executable, __file__, str(tmp_path_factory.mktemp("sweep")), *group],
                                  env=env, capture_output=True, text=True,
                                  timeout=480)  # the dearest group (fused_moe) about 20 s here, 137 s once on a busy machine
            assert done.returncode == 0, done.stderr[-3000:]
            reports[group] = json.loads(done.stdout.strip().splitlines()[-1])
        return reports[group]
    return report


@pytest.mark.parametrize("name", targets.NAMES)
def test_every_configuration_is_correct_on_every_code_path(sweeps, name):
    report = sweeps(name)
    assert [f for f in report["failures"] if f.startswith(f"{name} ")] == []
    assert report["configurations"][name] == len(search.search_space(name))


# --- the child process of the last test: every configuration, in the interpreter ---------------------------

# fp32, and bf16 (which the interpreter emulates); fp16 takes the same code and is in the checker runs above
SWEEP_DTYPES = ("float32", "bfloat16")


def _inputs(target, shape, params, dtype):
    import torch

    for kind in ("normal", "special"):
        yield kind, target.make_inputs(shape, dtype, torch.Generator().manual_seed(0), kind)
    if target.search.sweep_inputs:
        yield from target.search.sweep_inputs(shape, params, dtype)


def _run_configuration(name: str, params: dict, workdir: Path) -> list[str]:
    import torch

    from autotune.verify.plan.data import answers, as_tuple
    from autotune.verify.judge.compare import compare_all

    target, label = targets.get(name), search.label(name, params)
    path = workdir / f"{name}_{label.replace(',', '_').replace('=', '')}.py"
    path.write_text(search.render(name, params))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    failures = []
    for shape in target.search.sweep_shapes(params):
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
    from autotune.verify.interp.install import install

    install()  # as the checker's worker does: tl.dot, casts, races as on a GPU
    failures, count = [], {}
    for name in names:
        for params in search.search_space(name):
            failures += _run_configuration(name, params, workdir)
            count[name] = count.get(name, 0) + 1
    print(json.dumps({"configurations": count, "failures": failures}))


if __name__ == "__main__":
    _sweep(Path(sys.argv[1]), sys.argv[2:])
