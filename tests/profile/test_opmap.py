"""Op-name mapping: the targets' declared foreign ops, the user's map and map file, Hydra's `::` pitfall."""

import json

import pytest

from autotune import targets
from autotune.config import compose
from autotune.errors import UserError
from autotune.profile.opmap import build_map, declared_map
from autotune.profile.optable import op_table
from autotune.profile.profiler import op_map
from autotune.targets.base import ForeignOp


def _call(name: str, dims: list, concrete: list, types: list, ts: float = 10.0) -> dict:
    # calls on one thread follow each other: one starting inside another is nested in it (and not counted again)
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 5.0,
            "args": {"Input Dims": dims, "Concrete Inputs": concrete, "Input type": types}}


def test_every_target_declares_its_foreign_ops_and_no_name_is_claimed_twice():
    names = [f.name for t in targets.all_targets() for f in t.foreign_ops]
    assert len(names) == len(set(names))
    found = declared_map()
    assert found["autotune::rms_norm"].target == "rms_norm"
    assert found["vllm_ir::fused_add_rms_norm"].target == "fused_add_rms_norm"
    assert found["_C::rotary_embedding"].foreign.case_arg == 1 and found["_C::rotary_embedding"].foreign.call_rule
    assert found["autotune::rotary_embedding"].foreign.call_rule  # the target's own op, overridden with its rule
    assert found["_C::silu_and_mul"].foreign.case_arg == 1  # vLLM's (out, input)


def test_rotary_calls_give_their_case_from_the_head_size_and_style_and_refuse_what_does_not_fit():
    rotary = declared_map()["_C::rotary_embedding"].foreign
    first = targets.get("rotary_embedding").shape_from_dims
    dims = [[9], [9, 384], [9, 128], [], [4096, 64], []]
    assert rotary.case_shape(dims, ["", "", "", "128", "", "False"], first) == (9, 3, 1, 128, 64, 0, 4096)
    assert rotary.case_shape([[9], [9, 3, 128], [9, 1, 128], [], [4096, 128], []], ["", "", "", "128", "", "True"],
                             first) == (9, 3, 1, 128, 128, 1, 4096)  # q already [T, H, D]
    with pytest.raises(ValueError, match="not multiples"):
        rotary.case_shape([[9], [9, 100], [9, 64], [], [64, 32], []], ["", "", "", "32", "", "True"], first)
    with pytest.raises(ValueError, match="not a recorded bool"):
        rotary.case_shape(dims, ["", "", "", "128", "", ""], first)
    with pytest.raises(ValueError, match="no shape recorded"):
        rotary.case_shape([[], [], [], []], ["", "", "", "32"], first)
    with pytest.raises(ValueError, match="like"):
        ForeignOp("my::rope").case_shape(dims, [], first)  # the target's dims rule cannot give the style
    with pytest.raises(ValueError):
        ForeignOp("x", case_arg=-1)


def test_user_names_from_the_override_and_from_a_file_map_with_their_argument_positions(tmp_path):
    trace = {"traceEvents": [_call("my_engine::norm", [[4, 64], [64], []], ["", "", "1e-6"], ["c10::BFloat16"]),
                             _call("my_engine::rope", [[4], [4, 512], [4, 128], [], [2048, 64], []],
                                   ["", "", "", "64", "", "True"], ["long int", "float"], ts=20.0)]}
    mapfile = tmp_path / "names.yaml"
    mapfile.write_text("my_engine::rope: {target: rotary_embedding, like: '_C::rotary_embedding'}\n")
    cfg = compose(["+profile.target_map={my_engine\\:\\:norm: rms_norm}", f"profile.target_map_file={mapfile}"])
    ops = op_table(trace, op_map(cfg)).set_index("op")
    assert (ops.loc["my_engine::norm", "target"], ops.loc["my_engine::norm", "case_shape"]) == ("rms_norm", "[4, 64]")
    assert ops.loc["my_engine::norm", "dtype"] == "bfloat16"
    rope = ops.loc["my_engine::rope"]
    assert (rope["target"], rope["case_shape"], rope["dtype"]) == ("rotary_embedding", "[4, 8, 2, 64, 64, 1, 2048]",
                                                                   "float32")
    as_json = tmp_path / "names.json"
    as_json.write_text(json.dumps({"my_engine::norm": "fused_add_rms_norm"}))
    assert build_map({}, as_json)["my_engine::norm"].target == "fused_add_rms_norm"


def test_an_override_mangled_at_its_colons_says_how_to_escape_them():
    cfg = compose(["+profile.target_map={vllm_ir::my_norm: rms_norm}"])  # Hydra makes it {vllm_ir: ':my_norm: ...'}
    with pytest.raises(UserError) as e:
        op_map(cfg)
    assert "vllm_ir::my_norm" in str(e.value) and "\\:\\:" in str(e.value) and "target_map_file" in str(e.value)


@pytest.mark.parametrize("entry, says", [
    ({"op::a": "nope"}, "unknown target 'nope'"),
    ({"op::a": {"input": 1}}, "must be a target name"),
    ({"op::a": {"target": "rms_norm", "inputs": 1}}, "unknown keys ['inputs']"),
    ({"op::a": {"target": "rms_norm", "input": "x"}}, "bad argument position"),
    ({"op::a": {"target": "rotary_embedding", "like": "_C::rms_norm"}}, "not one of rotary_embedding's declared ops"),
])
def test_bad_user_entries_are_user_errors(entry, says):
    with pytest.raises(UserError) as e:
        build_map(entry)
    assert says in str(e.value)


@pytest.mark.parametrize("content, says", [(None, "no such file"), ("- a\n- b\n", "must hold a mapping"),
                                           ("a: [b\n", "not readable YAML/JSON")])
def test_a_bad_map_file_is_a_user_error(tmp_path, content, says):
    path = tmp_path / "map.yaml"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UserError, match=says.replace("[", r"\[")):
        build_map({}, path)
