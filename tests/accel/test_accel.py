"""The device layer: the registry, the CPU stand-in's figures and labels, and what a GPU-less machine says."""

import time

import pytest
import torch

from autotune import accel
from autotune.accel import Properties
from autotune.accel.cpu import Cpu, l2_bytes
from autotune.accel.cuda import Cuda
from autotune.accel.datasheets import peak_bandwidth_gbps, peak_tflops


def test_the_registry_names_both_layers_and_refuses_others():
    assert accel.names() == ("cpu", "cuda")
    assert isinstance(accel.get("cpu"), Cpu) and isinstance(accel.get("cuda"), Cuda)
    with pytest.raises(ValueError, match="no device layer 'tpu' \\(known: cpu, cuda\\)"):
        accel.get("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without a GPU")
def test_without_a_gpu_auto_is_the_cpu_stand_in():
    assert not accel.gpu_available() and accel.get("cuda").device_count() == 0
    assert accel.get("auto").name == "cpu" and accel.get().stand_in


def test_the_cpu_stand_in_says_so_and_interprets_triton():
    cpu = accel.get("cpu")
    p = cpu.properties()
    assert p == Properties(name="cpu (stand-in)", l2_bytes=l2_bytes(), sm_count=p.sm_count,
                           shared_memory_per_block_bytes=0, peak_bandwidth_gbps=None, peak_tflops=None, stand_in=True)
    assert p.sm_count >= 1 and cpu.available() and cpu.device_count() == 1 and cpu.runtime_version() is None
    assert cpu.interprets_triton and cpu.triton_env() == {"TRITON_INTERPRET": "1"} and not cpu.sandbox_gpu
    assert accel.get("cuda").triton_env() == {} and accel.get("cuda").compile_backend == "inductor"


def test_the_cpu_flush_buffer_is_twice_its_l2_and_lives_where_tensors_do():
    cpu = accel.get("cpu")
    flush = cpu.flush_buffer()
    assert flush.numel() == 2 * cpu.properties().l2_bytes and flush.dtype == torch.int8
    assert cpu.to_device(torch.ones(2)).device.type == "cpu" and cpu.to_device(1.5) == 1.5
    a, b = (torch.randn(4, generator=cpu.generator(7)) for _ in range(2))
    assert torch.equal(a, b)  # a seeded generator on the device


def test_the_cpu_window_times_the_call_and_returns_its_output():
    cpu = accel.get("cpu")
    us, out = cpu.timed(lambda s: (time.sleep(s), "done")[1], (0.02,))
    assert out == "done" and 15_000 < us < 2_000_000
    empty, nothing = cpu.timed(None, [])
    assert nothing is None and 0 <= empty < us
    assert 0.015 < cpu.median_s(lambda: time.sleep(0.02)) < 2.0
    cpu.synchronize()


def test_the_l2_size_is_read_from_sysfs_or_defaults(tmp_path):
    for i, (level, size) in enumerate([("1", "32K"), ("2", "2048K"), ("3", "32M")]):
        (tmp_path / f"index{i}").mkdir()
        (tmp_path / f"index{i}" / "level").write_text(level + "\n")
        (tmp_path / f"index{i}" / "size").write_text(size + "\n")
    assert l2_bytes(tmp_path) == 2 << 20
    assert l2_bytes(tmp_path / "missing") == 1 << 20
    (tmp_path / "index1" / "size").write_text("unknown\n")  # an unreadable entry is skipped, not fatal
    assert l2_bytes(tmp_path) == 1 << 20


def test_properties_are_validated():
    with pytest.raises(ValueError, match="a device has a name"):
        Properties("", 1, 1, 0, None, None, True)
    with pytest.raises(ValueError, match="negative size"):
        Properties("x", -1, 1, 0, None, None, True)


def test_datasheet_peaks_prefer_the_longest_name_and_the_override():
    assert peak_bandwidth_gbps("NVIDIA H100 PCIe") == 2000 and peak_bandwidth_gbps("NVIDIA H100 80GB HBM3") == 3350
    assert peak_tflops("NVIDIA A100-SXM4-80GB") == 312 and peak_tflops("cpu (stand-in)") is None
    assert peak_bandwidth_gbps("cpu (stand-in)", 50) == 50.0


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without a GPU")
def test_the_rest_of_autotune_asks_the_layer_whether_there_is_a_gpu():
    from autotune import env
    from autotune.agent import prompts, slots
    from autotune.errors import UserError

    record = env.collect()
    assert (record.gpu, record.cuda, record.gpu_count, record.device) == (None, None, 0, "cpu")
    assert env.resolve_device("auto") == "cpu" and env.resolve_device("cpu") == "cpu"
    with pytest.raises(UserError, match="device=cuda but torch sees no GPU"):
        env.resolve_device("cuda")
    assert slots.visible_gpus() == () and prompts._gpu_name("cuda") is None


def test_device_queries_are_answered_as_the_gpu_judged_for_where_there_is_none():
    """A launcher sizing a persistent grid by the SM count runs on the CPU the path it takes on an H200: the checker's
    host, the model check and served kernels answer `torch.cuda.get_device_properties` so (autotune.accel.queries);
    the interpreter compiles for the same GPU, its shared memory the same figure."""
    import subprocess
    import sys

    from autotune.accel import queries
    from autotune.verify.device import frontend

    assert (frontend.TARGET.arch, frontend.TARGET.warp_size) == (90, 32)
    assert frontend.MAX_SHARED_BYTES == queries.SM90.shared_memory_per_block_optin
    if torch.cuda.is_available():
        pytest.skip("a GPU answers for itself")
    assert queries.of_device() == queries.SM90
    script = ("import torch\nfrom autotune.accel import queries\n"
              "try:\n    torch.cuda.get_device_properties(0)\nexcept Exception as e:\n    print('raised', type(e).__name__)\n"
              "queries.answer()\np = torch.cuda.get_device_properties('cuda')\n"
              "print(p.multi_processor_count, p.major, p.minor, p.name)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    raised, answered = out.stdout.splitlines()
    assert raised.startswith("raised") and answered == "132 9 0 NVIDIA H200"
