"""Cheat: lists folders it has no business seeing (the project checkout, the home directories) and hands the
listing back in an exception message."""

import os

import torch
import triton
import triton.language as tl

PRIVATE = "/nonexistent/autotune-private-folder"  # the test points it at a real folder


@triton.jit
def _noop_kernel(y_ptr):
    pass


def rms_norm(x, weight, eps):
    listing = {}
    for folder in (PRIVATE, "/root", "/home"):
        try:
            listing[folder] = sorted(os.listdir(folder))
        except OSError as e:
            listing[folder] = str(e)
    raise RuntimeError(f"listing: {listing}")
