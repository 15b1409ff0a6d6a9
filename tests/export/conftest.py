"""A kernels/ folder as `autotune review approve` leaves it, filled with the checker's correct example kernels."""

import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CANDIDATES, EXAMPLES = ROOT / "tests" / "verify" / "candidates", ROOT / "autotune" / "targets" / "examples"
CORRECT = {"rms_norm": CANDIDATES / "rms_norm_rowwise.py", "fused_add_rms_norm": EXAMPLES / "fused_add_rms_norm.py",
           "rotary_embedding": EXAMPLES / "rotary_embedding.py", "silu_and_mul": EXAMPLES / "silu_and_mul.py",
           "softmax": EXAMPLES / "softmax.py"}


@pytest.fixture
def kernels_dir(tmp_path) -> Path:
    for target, name in CORRECT.items():
        folder = tmp_path / "kernels" / target / "k1"
        folder.mkdir(parents=True)
        shutil.copyfile(name, folder / "kernel.py")
        (folder / "provenance.json").write_text(json.dumps(
            {"target": target, "created_at": "2026-12-01T09:00:00+00:00", "verdict": {"status": "unmeasured"}}))
    return tmp_path / "kernels"
