"""autotune: profile a served LLM, let an agent write Triton kernels, prove them, propose them.

The loop (see README.md): serve -> profile -> hotspots -> agent -> verify -> ledger -> publish -> review
-> kernels/ -> the served model runs with the merged kernels. Importing this package initialises no GPU
and imports no heavy dependency; each stage lives in its own subpackage.
"""

__version__ = "0.1.0"
