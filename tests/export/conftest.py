"""A kernels/ folder as `autotune review approve` leaves it, filled with the checker's correct example kernels."""

import json
import shutil
from pathlib import Path

import pytest

CANDIDATES = Path(__file__).resolve().parents[1] / "verify" / "candidates"
CORRECT = {"rms_norm": "rms_norm_rowwise.py", "fused_add_rms_norm": "fused_add_rms_norm.py",
           "rotary_embedding": "rotary_embedding.py", "silu_and_mul": "silu_and_mul.py", "softmax": "softmax.py"}


@pytest.fixture
def kernels_dir(tmp_path) -> Path:
    for target, name in CORRECT.items():
        folder = tmp_path / "kernels" / target / "k1"
        folder.mkdir(parents=True)
        shutil.copyfile(CANDIDATES / name, folder / "kernel.py")
        (folder / "provenance.json").write_text(json.dumps(
            {"target": target, "created_at": "2026-12-01T09:00:00+00:00", "verdict": {"status": "unmeasured"}}))
    return tmp_path / "kernels"
