"""Every target, walked once: what a target module declares is complete, consistent, and used everywhere.

Run: pytest tests/targets (a few seconds). The two checks that run the real checker are parametrized over the
same package walk and live with the checker's and the search agent's tests: each target's example kernel is
judged `unmeasured` in tests/verify/test_correct.py, and the first configuration of each target's search space
in tests/agent/test_search.py.
"""

from __future__ import annotations

import ast
import inspect
import pkgutil

import pytest
import torch

import autotune.targets
from autotune import config, targets
from autotune.agent import prompts, search
from autotune.serve import dispatch
from autotune.verify.plan import cases
from autotune.targets.base import OpClass, Target, numel
from autotune.verify.static import policy
from autotune.verify.plan.data import as_tuple, generator

SALT = b"tests/targets"  # the case generators are keyed by a salt; any fixed one makes these inputs

GEN_KINDS = ("normal", "special")


def _small_shape(t: Target) -> tuple[int, ...]:
    return tuple(min(t.edge_shapes + t.default_shapes, key=numel))


def test_names_are_every_module_with_a_target_in_a_stable_order():
    modules = sorted(m.name for m in pkgutil.iter_modules(autotune.targets.__path__) if not m.name.startswith("_"))
    assert list(targets.NAMES) == sorted(targets.NAMES) and set(targets.NAMES) <= set(modules)
    assert set(modules) - set(targets.NAMES) == {"base", "space"}  # the package's own parts, no TARGET in them
    assert {"rms_norm", "silu_and_mul", "fused_add_rms_norm", "rotary_embedding", "softmax"} <= set(targets.NAMES)


@pytest.mark.parametrize("name", targets.NAMES)
def test_reference_is_annotated_and_its_schema_is_the_dispatch_points(name):
    t = targets.get(name)
    assert t.name == name and t.reference.__name__ == name
    assert all(p.annotation is not p.empty for p in inspect.signature(t.reference).parameters.values())
    assert t.schema.startswith(f"{name}(") and "->" in t.schema  # torch.library.infer_schema accepted it
    schema = getattr(torch.ops.autotune, name).default._schema
    assert [a.name for a in schema.arguments] == list(t.arg_names)
    assert dispatch.current(name) is t.reference and name not in dispatch.overridden()
    args = t.make_inputs(_small_shape(t), torch.float32, generator(t, _small_shape(t), torch.float32, "normal", 0,
                                                                       SALT), "normal")
    via_op, direct = as_tuple(getattr(dispatch, name)(*args)), as_tuple(t.reference(*args))
    assert len(via_op) == len(direct) and all(torch.equal(a, b) for a, b in zip(via_op, direct))


@pytest.mark.parametrize("name", targets.NAMES)
def test_the_reference_the_prompt_shows_defines_every_helper_it_calls(name):
    source = targets.get(name).reference_source()
    namespace = {"torch": torch, "F": torch.nn.functional}  # what every target module imports
    exec(compile(source, f"<{name} reference>", "exec"), namespace)  # noqa: S102 - our own targets' source
    t = targets.get(name)
    args = t.make_inputs(_small_shape(t), torch.float32, generator(t, _small_shape(t), torch.float32, "normal", 0,
                                                                       SALT), "normal")
    shown, direct = as_tuple(namespace[name](*args)), as_tuple(t.reference(*args))  # runs on its own
    assert all(torch.equal(a, b) for a, b in zip(shown, direct))
    if name == "fused_add_rms_norm_quant":
        assert source.count("\ndef ") == 3 and "def per_token_int8" in source and "def upcast" in source


@pytest.mark.parametrize("name", targets.NAMES)
def test_shapes_dtypes_tolerances_and_the_roofline_are_declared(name):
    t = targets.get(name)
    assert t.summary and t.default_shapes and t.edge_shapes and t.dtypes
    assert set(t.dtypes) <= set(t.tolerances) and isinstance(t.op_class, OpClass)
    for shape in t.default_shapes + t.edge_shapes:
        for dtype in t.dtypes:
            assert t.bytes_moved(shape, dtype) > 0 and t.flops(shape, dtype) > 0, (shape, dtype)
            assert t.floor_us(shape, dtype, 3350.0, 989.0) >= t.floor_us(shape, dtype, 3350.0) > 0
            assert t.roofline(shape, dtype, 3350.0)[1] == "memory" and t.roofline(shape, dtype, None, 989.0)[1] == \
                "compute"
            # a memory-bound op is memory-bound on an H100 at every declared shape
            floor, bound = t.roofline(shape, dtype, 3350.0, 989.0)
            if t.op_class is OpClass.MEMORY_BOUND:
                assert bound == "memory", (shape, dtype)
        assert t.cut_shape(shape, None, None) == tuple(shape)
        cut = t.cut_shape(shape, 4, 4096)
        assert len(cut) == len(shape) and numel(cut) <= numel(shape)


@pytest.mark.parametrize("name", targets.NAMES)
def test_inputs_and_outputs_fit_the_declared_bounds(name):
    t = targets.get(name)
    for shape in t.edge_shapes:
        for kind in GEN_KINDS:
            args = t.make_inputs(shape, torch.bfloat16, generator(t, shape, torch.bfloat16, kind, 0, SALT), kind)
            assert len(args) == len(t.arg_names)
            outputs = as_tuple(t.reference(*args))
            inputs_bound, outputs_bound = t.io_elements(shape)
            assert sum(a.numel() for a in args if isinstance(a, torch.Tensor)) <= inputs_bound, shape
            assert sum(o.numel() for o in outputs) <= outputs_bound, shape



@pytest.mark.parametrize("name", [n for n in targets.NAMES if targets.get(n).rows_problem is not None])
def test_rows_problem_answers_the_rows_it_names_as_the_whole_reference_does(name):
    """The judge makes a sampled range case's reference at the rows its programs wrote (plan.data.answer_rows):
    the smaller call must give exactly those rows of the whole call's outputs, windows, GQA, prefill rows in the
    middle of a chunk and decodes included (in fp64, so that only a wrong row, not a summation order, shows)."""
    t = targets.get(name)
    rng = torch.Generator().manual_seed(5)
    for shape in (*t.edge_shapes, *t.default_shapes, *[c for s in t.default_shapes for c in t.range_cuts(s)]):
        shape = t.cut_shape(shape, 256, 1 << 18)
        args = t.make_inputs(shape, torch.float64, generator(t, shape, torch.float64, "normal", 0, SALT), "normal")
        whole = as_tuple(t.reference(*args))
        total = whole[0].shape[0]
        rows = sorted(set(torch.randint(0, total, (3,), generator=rng).tolist()) | {total - 1})
        sub, taken = t.rows_problem(args, rows)
        assert set(rows) <= set(taken) and len(taken) == len(set(taken)), shape
        for part, out in zip(as_tuple(t.reference(*sub)), whole):
            torch.testing.assert_close(part, out[taken], rtol=1e-12, atol=1e-12, msg=lambda m: f"{shape}: {m}")

@pytest.mark.parametrize("name", targets.NAMES)
def test_example_kernel_and_search_space_are_declared_and_legal(name):
    t = targets.get(name)
    assert t.example_path is not None and t.example_path.is_file()
    assert policy.scan(policy.parse(t.example_path.read_text()), t) == []
    assert t.search is not None and t.search.configs
    for params in t.search.configs:
        source = search.render(name, params)
        tree = policy.parse(source)
        assert policy.scan(tree, t) == [], search.label(name, params)
        entry = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
        assert tuple(a.arg for a in entry.args.args) == t.arg_names


@pytest.mark.parametrize("name", targets.NAMES)
def test_prompt_section_renders_with_the_class_advice_and_the_floor(name):
    t = targets.get(name)
    text = prompts.task_message(t, None, prompts.Roofline(3350.0, "test figures", 989.0), index=0, candidates=1)
    assert t.signature in text and t.summary in text
    assert f"`{name}` is {t.op_class.value}" in text  # prompts/advice/<class>.md.j2
    assert "3,350 GB/s" in text and "989 TFLOP/s" in text
    assert f"[{t.label_shape(t.edge_shapes[0])}]" in text  # every dim named
    assert all(f"- {line.strip()}" in text for line in t.advice)  # the op's own advice, after its class's
    served = [s for p in config.model_presets() for s in t.model_shapes(p, 64)] if t.model_shapes else []
    ranks = {len(shape) for shape in [*t.default_shapes, *t.edge_shapes, *served]}
    assert len(t.dims) == 1 or max(ranks) == len(t.dims)  # all dims named (prefill's context only in served shapes)
    assert all(t.label_shape(shape).count("=") == len(shape) for shape in [*t.default_shapes, *served]) or len(t.dims) == 1
