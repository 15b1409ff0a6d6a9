"""The README's "Adding a target" recipe, done: a row-wise LayerNorm from three files alone.

A temporary copy of the package and its target-walking tests gets exactly the three files the README lists
(tests/targets/recipe/: the target module, its search template, its example kernel), and in that copy the
target-walking tests (tests/targets/test_targets.py, tests/verify/test_correct.py, tests/agent/test_search.py)
pass for layer_norm, and `autotune verify` passes its example. Nothing else is edited: a hand-written list of
targets or per-target facts anywhere (a test's table of sweep shapes, a prompt's advice) fails here.

The copy runs under a venv of its own whose path lists the copy first and this venv's site-packages after it, so
that `python -I` (the checker's child processes) imports the copy too. Measured: 87 s of CPU (388 s wall on the
2 shared cores under a load of ~8): the checker's default plan on the example (tests/verify/test_correct.py), the
quick plan on the first search configuration, the sweep of all 10 configurations, and `autotune verify`.
"""

from __future__ import annotations

import json
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECIPE = Path(__file__).resolve().parent / "recipe"
# what the README's table names, and where each file goes
FILES = {"layer_norm.py": "autotune/targets/layer_norm.py",
         "layer_norm.py.j2": "autotune/targets/templates/layer_norm.py.j2",
         "layer_norm_example.py": "autotune/targets/examples/layer_norm.py"}
WALKING_TESTS = ["tests/targets/test_targets.py", "tests/verify/test_correct.py", "tests/agent/test_search.py"]


def _copy(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "fixtures")
    shutil.copytree(ROOT / "autotune", dest / "autotune", ignore=ignore)
    for part in ("conf", "prompts", "tests/targets", "tests/verify", "tests/agent"):  # conf, prompts: beside autotune/
        shutil.copytree(ROOT / part, dest / part, ignore=ignore)
    for shared in (ROOT / "tests").glob("*.py"):  # the suite's shared settings (tests/quick.py, tests/shared.py)
        shutil.copy(shared, dest / "tests" / shared.name)
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    for name, where in FILES.items():
        assert not (dest / where).exists(), f"{where} already exists: the throwaway target's name is taken"
        shutil.copy(RECIPE / name, dest / where)


def _python(tmp: Path, project: Path) -> Path:
    """A venv whose sys.path is the copy, then this venv's packages (the editable install's finder is not
    loaded: a path named in a .pth is no site directory, so its own .pth files are not read)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "venv")], check=True)
    (purelib,) = (tmp / "venv" / "lib").glob("python*/site-packages")
    (purelib / "overlay.pth").write_text(f"{project}\n" + "\n".join(site.getsitepackages()) + "\n")
    return tmp / "venv" / "bin" / "python"


@pytest.mark.slow  # 87 s of CPU: the proof spans the checker, the search agent and the package walk
@pytest.mark.timeout(900)
def test_a_row_wise_target_is_the_three_files_the_readme_lists(tmp_path):
    readme = (ROOT / "README.md").read_text()
    recipe = readme[readme.index("## Adding a target"):]
    assert "A row-wise op touches three files" in recipe and all(f"`{w.replace('layer_norm', '<op>')}`" in recipe
                                                                   for w in FILES.values())
    project = tmp_path / "project"
    _copy(project)
    python = _python(tmp_path, project)
    found = subprocess.run([python, "-I", "-c", "import autotune, autotune.targets as t; print(autotune.__file__, "
                            "'layer_norm' in t.NAMES)"], capture_output=True, text=True, check=True).stdout.split()
    assert found == [str(project / "autotune" / "__init__.py"), "True"]

    tests = subprocess.run([python, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-k", "layer_norm",
                            *WALKING_TESTS], cwd=project, capture_output=True, text=True, timeout=840)
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-2000:]
    passed = int(tests.stdout.strip().splitlines()[-1].split(" passed")[0].split()[-1])
    assert passed >= 10, tests.stdout[-2000:]  # every walking test took layer_norm, none was skipped

    verdict = subprocess.run([python, "-m", "autotune.cli", "verify", "layer_norm", FILES["layer_norm_example.py"],
                              "--json", "verify=quick", "verify.shapes=default", "verify.dtypes=[float32]"],
                             cwd=project, capture_output=True,  # the CLI finds it (test_correct judged every dtype)
                             text=True, timeout=600)
    assert verdict.returncode == 0, verdict.stdout[-2000:] + verdict.stderr[-2000:]
    assert json.loads(verdict.stdout)["status"] == "unmeasured"
