"""Vendor datasheet peaks by GPU name: the roofline floor a timing is held to, and the prompt's figures.

Matched by name fragment, the longest match wins ("H100 PCIe" before "H100"); a configured value
(verify.peak_bandwidth_gbps, verify.peak_tflops) overrides the table.
"""

from __future__ import annotations

from collections.abc import Mapping

# Peak DRAM bandwidth in GB/s.
PEAK_BANDWIDTH_GBPS = {
    "H200": 4800, "H100 SXM": 3350, "H100 NVL": 3900, "H100 PCIe": 2000, "H100": 3350, "GH200": 4000,
    "B200": 8000, "A100-SXM4-80GB": 2039, "A100 80GB PCIe": 1935, "A100-PCIE-80GB": 1935, "A100": 1555,
    "L40S": 864, "L40": 864, "L4": 300, "A10G": 600, "A10": 600, "T4": 320, "V100": 900,
    "RTX 4090": 1008, "RTX 3090": 936, "MI300X": 5300,
}
# Peak dense bf16/fp16 tensor-core rate in TFLOP/s (without sparsity), for the FLOP side of the floor of
# compute-bound targets.
PEAK_TFLOPS = {
    "H200": 989, "H100 SXM": 989, "H100 NVL": 835, "H100 PCIe": 756, "H100": 989, "GH200": 989,
    "B200": 2250, "A100": 312, "L40S": 362, "L40": 181, "L4": 121, "A10G": 70, "A10": 125, "T4": 65,
    "V100": 125, "RTX 4090": 165, "RTX 3090": 71, "MI300X": 1307,
}


def lookup(table: Mapping[str, float], gpu_name: str, override: float | str | None = None) -> float | None:
    if override is not None:
        return float(override)
    matches = [k for k in table if k.lower() in gpu_name.lower()]
    return float(table[max(matches, key=len)]) if matches else None


def peak_bandwidth_gbps(gpu_name: str, override: float | str | None = None) -> float | None:
    return lookup(PEAK_BANDWIDTH_GBPS, gpu_name, override)


def peak_tflops(gpu_name: str, override: float | str | None = None) -> float | None:
    return lookup(PEAK_TFLOPS, gpu_name, override)
