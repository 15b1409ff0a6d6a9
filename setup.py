"""The one packaging setting pyproject.toml cannot say: `conf/` and `prompts/` sit at the top of the repository,
beside `autotune/`, and install inside it as package data (`autotune/conf/`, `autotune/prompts/`; their files are
listed in pyproject.toml's package-data). Everything else is in pyproject.toml."""

from setuptools import find_packages, setup

DATA = {"autotune.conf": "conf", "autotune.prompts": "prompts"}  # package -> its top-level folder

setup(packages=[*find_packages(include=["autotune", "autotune.*"]), *DATA], package_dir=DATA)
