"""Where the configuration and the prompts are found: `conf/` and `prompts/` at the top of a checkout (their one
source), the copies inside the package in a wheel install (scripts/wheel_check.sh installs one)."""

from pathlib import Path

from autotune import config
from autotune.agent import prompts

ROOT = Path(__file__).resolve().parents[1]


def test_a_checkout_reads_the_top_level_folders():
    assert config.conf_dir() == ROOT / "conf" and (ROOT / "conf" / "config.yaml").is_file()
    assert config.PROMPTS_DIR == ROOT / "prompts" and (ROOT / "prompts" / "system.md.j2").is_file()
    assert not (ROOT / "autotune" / "conf").exists() and not (ROOT / "autotune" / "prompts").exists()
    assert "model" in config.groups() and prompts.system_message().strip()


def test_a_wheel_reads_its_own_copy_before_a_folder_beside_it(tmp_path):
    site = tmp_path / "site-packages"
    (site / "autotune" / "conf").mkdir(parents=True)
    (site / "conf").mkdir()  # another distribution's top-level folder of the same name
    assert config._data_dir("conf", site / "autotune") == site / "autotune" / "conf"
    assert config._data_dir("prompts", site / "autotune") == site / "prompts"  # not shipped: where a checkout has it
