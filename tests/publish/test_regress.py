"""`autotune regress` after an "upgrade": two real merged proposals in a real git repository, one of them
broken on purpose by a later commit. The real command re-judges both with the checker: it must name the
broken one WRONG, pass the untouched one, exit 1, and write the same table as markdown."""

from __future__ import annotations

import re
import subprocess
import sys

from autotune import kernels, publish
from tests.quick import PIPELINE_CHECK

STORE = "tl.store(y_row + offs, (x * inv_rms * w).to(y_ptr.dtype.element_ty), mask=mask)"
FAST = [*PIPELINE_CHECK, "verify.max_interpreter_rows=16", "verify.max_interpreter_elements=16384",
        "verify.max_interpreter_rows_extra=8"]


def test_regress_names_the_kernel_an_upgrade_broke_and_passes_the_others(project, make_request, cfg_of, git, tmp_path):
    cfg = cfg_of(project)
    source = make_request().source
    assert STORE in source
    kept = publish.publish(make_request(source), cfg)
    broken = publish.publish(make_request(source + "\n# a second merged kernel, later broken\n"), cfg)
    publish.approve(cfg, kept.id)
    publish.approve(cfg, broken.id)
    path = project / broken.kernel_dir / "kernel.py"
    path.write_text(path.read_text().replace(STORE, STORE.replace("inv_rms * w", "inv_rms * w * 1.01")))
    git(project, "-c", "user.name=U", "-c", "user.email=u@example.com", "commit", "-qam", "an upgrade breaks it")
    assert len(kernels.merged(project / "kernels")["rms_norm"]) == 2

    out = tmp_path / "regress.md"
    done = subprocess.run([sys.executable, "-m", "autotune.cli", "regress", "--out", str(out),
                           f"kernels.dir={project / 'kernels'}", *FAST], capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 of 2 merged kernel(s) regressed" in done.stdout
    table = out.read_text()
    broken_row = next(line for line in table.splitlines() if broken.id.split("-")[-1] in line)
    kept_row = next(line for line in table.splitlines() if kept.id.split("-")[-1] in line)
    assert "| WRONG | unmeasured | incorrect |" in broken_row, table
    assert "| ok | unmeasured | unmeasured |" in kept_row and "speed not compared" in kept_row, table
    assert re.search(r"Environment: .+, driver .+, torch .+, triton .+, commit \w+", table), table
