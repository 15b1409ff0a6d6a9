"""Every candidate gets a verdict (issue 28): a file that crashes the checker's own code, or is too big to work on,
is refused with its cause, within bounds set before any work, and `--json` prints one object whatever happens.
Each bound is also tested with the ones in front of it lifted: the layer behind must still fail closed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.config import compose
from autotune.verify import verify
from autotune.verify.static.size import SourceLimits, tree_problem
from autotune.verify.verdict import Status

CANDIDATES = Path(__file__).parent / "candidates"
KERNEL = (CANDIDATES / "rms_norm_rowwise.py").read_text()  # an honest file to hide each attack in
CFG = compose(["device=cpu", "verify=quick", "verify.dtypes=[float32]"])


def chain(terms: int) -> str:
    return KERNEL + "\n\nCHAIN = " + "+".join(["1"] * terms) + "\n"


@pytest.mark.parametrize("terms, status", [(400, Status.POLICY_VIOLATION), (3000, Status.COMPILE_ERROR),
                                           (100_000, Status.COMPILE_ERROR)])
def test_a_deep_expression_is_a_verdict_not_a_crash(terms, status):
    v = verify("rms_norm", chain(terms), CFG)  # 400 terms crashed the scan, 3000 the parser
    assert v.status is status, v.reason
    assert "nested" in v.reason and "verify.max_tree_depth" in v.reason and not v.cases


def test_with_the_size_bounds_lifted_a_crashing_scan_still_ends_in_a_verdict():
    lifted = compose(["device=cpu", "verify=quick", "verify.max_tree_depth=100000", "verify.max_tree_nodes=10000000"])
    v = verify("rms_norm", chain(400), lifted)  # parses, then the recursive scan runs out of stack
    assert v.status is Status.POLICY_VIOLATION, v.reason
    assert v.reason.startswith("the checker failed while scanning it (RecursionError)"), v.reason


def test_a_large_file_is_refused_before_it_is_parsed():
    big = KERNEL + "\nTABLE = (" + ",".join(["1234567"] * 1_300_000) + ")\n"  # 10 MB of constants
    v = verify("rms_norm", big, CFG)
    assert v.status is Status.POLICY_VIOLATION and "verify.max_source_kb" in v.reason, v.reason
    assert v.duration_s < 2


def test_a_file_over_the_bound_is_never_read_whole_and_its_digest_is_the_files(tmp_path):
    import hashlib
    import tracemalloc

    path = tmp_path / "huge.py"
    with path.open("w") as f:  # 64 MB: held whole (and encoded twice) it would take hundreds of MB
        f.write(KERNEL)
        for _ in range(64):
            f.write("# " + "é" * (1 << 19) + "\n")
    verify("rms_norm", KERNEL + "\n# \u202e", CFG)  # the judge's imports made: what follows is the file's cost
    tracemalloc.start()
    v = verify("rms_norm", path, CFG)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert v.status is Status.POLICY_VIOLATION and "verify.max_source_kb" in v.reason, v.reason
    assert v.candidate_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert peak < 16 << 20, f"{peak >> 20} MB allocated while judging a file it need not read"


def test_a_source_with_characters_that_read_otherwise_is_refused_before_it_is_parsed():
    for hidden in ("\u202e", "\u2066", "\u200b", "\x1b"):  # "Trojan Source" (CVE-2021-42574), a terminal escape
        v = verify("rms_norm", KERNEL.replace('"""A', f'"""{hidden}A', 1), CFG)
        assert v.status is Status.POLICY_VIOLATION and f"U+{ord(hidden):04X}" in v.reason, v.reason


def test_a_wide_file_under_the_byte_bound_is_refused_by_its_node_count():
    wide = KERNEL + "\nTABLE = (" + ",".join(["1"] * 60_000) + ")\n"  # 120 kB, 60,000 nodes
    v = verify("rms_norm", wide, CFG)
    assert v.status is Status.POLICY_VIOLATION and "verify.max_tree_nodes" in v.reason, v.reason


def test_the_bounds_pass_every_honest_file():
    import ast

    limits = SourceLimits.from_config(CFG.verify)
    for path in sorted(CANDIDATES.glob("*.py")):
        try:
            tree = ast.parse(path.read_text())
        except SyntaxError:
            continue
        assert tree_problem(tree, limits) == "", path.name


@pytest.mark.parametrize("setting", ["verify.max_source_kb=0", "verify.max_tree_depth=-3", "verify.max_tree_nodes=x"])
def test_a_bad_bound_is_a_user_error_naming_it(setting):
    from autotune.errors import UserError

    with pytest.raises(UserError, match=setting.split("=")[0]):
        verify("rms_norm", KERNEL, compose(["device=cpu", setting]))


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """`autotune verify` in a child, its peak memory (kB) appended to stderr's last line."""
    probe = ("import resource, sys, runpy; sys.argv = ['autotune', *sys.argv[1:]]\n"
             "try:\n    runpy.run_module('autotune.cli', run_name='__main__')\n"
             "finally:\n    print('maxrss', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n")
    return subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, cwd=tmp_path,
                          timeout=300)


def _peak_mb(proc: subprocess.CompletedProcess) -> float:
    return int(proc.stderr.strip().splitlines()[-1].split()[-1]) / 1024


@pytest.mark.parametrize("attack", ["deep", "large"])
def test_the_cli_prints_one_object_for_an_attack_on_the_bounds(tmp_path, attack):
    path = tmp_path / "candidate.py"
    path.write_text(chain(3000) if attack == "deep" else KERNEL + "\nT = (" + ",".join(["7"] * 5_000_000) + ")\n")
    proc = _cli(tmp_path, "verify", "rms_norm", str(path), "--json", "device=cpu")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["status"] in ("policy_violation", "compile_error")
    print(f"judge peak memory on the {attack} attack: {_peak_mb(proc):.0f} MB")  # a figure, not a gate (README)


def test_json_for_bad_input_is_one_object_too(tmp_path):
    proc = _cli(tmp_path, "verify", "rms_norm", str(tmp_path / "missing.py"), "--json")
    assert proc.returncode == 2
    assert "not found" in json.loads(proc.stdout)["error"]


