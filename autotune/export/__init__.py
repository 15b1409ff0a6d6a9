"""Export: merged kernels out to the engines users serve with (`autotune export vllm|hf`, see command.py).

`bundle.py` writes the package; `vllm_plugin.py` and `hf_patch.py` are the packages' runtime modules,
copied as they are (they import nothing from autotune).
"""
