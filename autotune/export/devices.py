"""A launcher's device queries where no GPU is, in an exported package: copied beside the package's `__init__.py`
(autotune/export/bundle.py), it imports nothing from autotune.

Without a GPU (the Triton interpreter), `torch.cuda.get_device_properties` answers with the facts of the GPU the
kernels were judged for (the manifest's `judged_for`, written from autotune.accel.queries), as the checker answered
it; with a GPU the real call answers.
"""

import types


def answer_device_queries(manifest: dict) -> None:
    import torch

    if torch.cuda.is_available() or "judged_for" not in manifest:
        return
    facts = types.SimpleNamespace(**manifest["judged_for"])
    vars(torch.cuda)["get_device_properties"] = lambda device=None: facts  # vars(): no _CudaDeviceProperties here
