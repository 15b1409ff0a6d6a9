"""Triton's CPU interpreter made to compute as a GPU does; every patch is applied by `install.install()`."""
