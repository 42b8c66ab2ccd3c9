"""Precision ``auto``: bf16 where the device computes it natively, recorded by the run, kept on resume."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers import QUIET, REPO, tiny

import sa_conv.utils.machine as machine
from experiments import run
from experiments.cli import main_guard
from sa_conv.training.config import RunConfig, config_difference
from sa_conv.training.precision import settle_precision, warn_slow_bf16
from sa_conv.utils.safe_load import read_checkpoint, run_config_of

# two heads and a narrow feed-forward layer: one epoch of 64 synthetic images in batches of 32, on the CPU
TWO_HEADS = ["quadratic", *tiny(heads=2, epochs=1), "--ffn", "16", "--synthetic", "--synthetic-size", "64"]
TWO_HEADS += ["--batch-size", "32", *QUIET, "--accelerator", "cpu"]


def cpu_with(monkeypatch: pytest.MonkeyPatch, flags: str) -> None:
    """Pretend to be a CPU whose /proc/cpuinfo lists ``flags`` (no override in the environment)."""
    lines = ["model name\t: Test CPU", f"flags\t\t: fpu sse2 avx2 {flags}"]
    monkeypatch.setattr(machine, "_cpuinfo", lambda: lines)
    monkeypatch.delenv("SA_CONV_CPU_BF16", raising=False)


@pytest.mark.parametrize(
    ("flags", "native"), [("avx512f avx512_bf16", True), ("amx_tile amx_bf16", True), ("avx512f", False)]
)
def test_native_bf16_is_read_from_the_cpus_flags(monkeypatch, flags, native) -> None:
    cpu_with(monkeypatch, flags)
    assert machine.cpu_has_native_bf16() is native
    assert machine.hardware()["cpu_native_bf16"] is native


def test_arm_bf16_feature_counts(monkeypatch) -> None:
    cpu_with(monkeypatch, "")
    monkeypatch.setattr(machine, "_cpuinfo", lambda: ["Features\t: fp asimd bf16 i8mm"])
    assert machine.cpu_has_native_bf16()


def test_the_environment_overrides_the_flags(monkeypatch) -> None:
    cpu_with(monkeypatch, "avx2")
    monkeypatch.setenv("SA_CONV_CPU_BF16", "native")
    assert machine.cpu_has_native_bf16() and machine.resolve_precision("auto", "cpu") == "bf16-mixed"
    cpu_with(monkeypatch, "amx_bf16")
    monkeypatch.setenv("SA_CONV_CPU_BF16", "emulated")
    assert not machine.cpu_has_native_bf16() and machine.resolve_precision("auto", "cpu") == "32-true"
    monkeypatch.setenv("SA_CONV_CPU_BF16", "")  # set empty: as unset, the flags decide
    assert machine.cpu_has_native_bf16()
    monkeypatch.setenv("SA_CONV_CPU_BF16", "yes")
    with pytest.raises(ValueError, match="SA_CONV_CPU_BF16='yes': expected native or emulated"):
        machine.cpu_has_native_bf16()


def test_tests_see_no_native_bf16_on_any_machine() -> None:
    """The suite's own default (conftest): float32 wherever it runs, GPU or CPU with AMX alike."""
    assert not machine.cpu_has_native_bf16() and not machine.cuda_has_native_bf16()
    assert machine.resolve_precision("auto", "cpu") == machine.resolve_precision("auto", "auto") == "32-true"


REAL_CUDA_BF16 = machine.cuda_has_native_bf16


def gpu_with(monkeypatch: pytest.MonkeyPatch, *, bf16: bool) -> None:
    """Pretend to be a machine with a CUDA GPU, with or without native bf16 (without it, PyTorch still
    says bf16 is supported unless asked to leave emulation out)."""
    monkeypatch.setattr(machine, "cuda_has_native_bf16", REAL_CUDA_BF16)
    monkeypatch.setattr(machine.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(
        machine.torch.cuda, "is_bf16_supported", lambda including_emulation=True: bf16 or including_emulation
    )


def test_auto_is_bf16_where_bf16_is_native_and_float32_elsewhere(monkeypatch) -> None:
    cpu_with(monkeypatch, "avx512f avx512_bf16")
    assert machine.resolve_precision("auto", "cpu") == "bf16-mixed"
    cpu_with(monkeypatch, "avx512f")  # bf16 would be emulated: slower than float32
    assert machine.resolve_precision("auto", "cpu") == "32-true"
    gpu_with(monkeypatch, bf16=True)
    assert machine.resolve_precision("auto", "gpu") == "bf16-mixed"
    assert machine.resolve_precision("auto", "cuda") == "bf16-mixed"  # a torch device's type
    assert machine.resolve_precision("auto", "auto") == "bf16-mixed"  # auto: the GPU
    assert machine.resolve_precision("auto", "cpu") == "32-true"  # the CPU asked for, by name
    gpu_with(monkeypatch, bf16=False)  # before Ampere: float32 with TF32 products
    assert machine.resolve_precision("auto", "gpu") == "32-true"
    for explicit in ("32-true", "bf16-mixed"):
        assert machine.resolve_precision(explicit, "cpu") == explicit


def test_a_resumed_run_keeps_its_precision(monkeypatch, capsys) -> None:
    config = RunConfig(model="quadratic")  # precision auto
    cpu_with(monkeypatch, "avx512f")
    assert settle_precision(config, "cpu", {"precision": "bf16-mixed"}).precision == "bf16-mixed"
    assert settle_precision(config, "cpu").precision == "32-true"  # a new run: this machine's choice
    cpu_with(monkeypatch, "avx512_bf16")  # a machine that would pick bf16 for a new run
    assert settle_precision(config, "cpu").precision == "bf16-mixed"
    assert settle_precision(config, "cpu", {"precision": "32-true"}).precision == "32-true"
    assert settle_precision(config, "cpu", {"precision": "auto"}).precision == "32-true"  # older runs
    gpu_with(monkeypatch, bf16=True)
    assert settle_precision(config, "gpu", {"precision": "32-true"}).precision == "32-true"
    assert settle_precision(config, "gpu", {"precision": "auto"}).precision == "32-true"
    cpu_with(monkeypatch, "avx2")
    warn_slow_bf16(config.replace(precision="bf16-mixed"), "cpu")
    assert "no native bf16" in capsys.readouterr().err  # it says it will be slow


def test_auto_matches_any_recorded_precision_but_an_explicit_one_must_agree() -> None:
    stored = RunConfig(model="quadratic", precision="bf16-mixed").to_dict()
    assert config_difference(stored, RunConfig(model="quadratic").to_dict()) == []
    differs = config_difference(stored, RunConfig(model="quadratic", precision="32-true").to_dict())
    assert differs == ["precision='bf16-mixed' (now: '32-true')"]


@pytest.mark.parametrize(("flags", "expected"), [("avx512_bf16", "bf16-mixed"), ("avx2", "32-true")])
def test_a_new_run_in_auto_trains_in_its_machines_default(tmp_path: Path, monkeypatch, flags, expected):
    cpu_with(monkeypatch, flags)
    assert main_guard(run.main)([*TWO_HEADS, "--output-dir", str(tmp_path)]) == 0
    run_dir = tmp_path / "quadratic" / "version_0"
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["precision"] == expected
    assert run_config_of(read_checkpoint(run_dir / "checkpoints" / "last.ckpt"))["precision"] == expected


def test_the_run_records_its_precision_and_resumes_in_it(tmp_path: Path, monkeypatch, capsys) -> None:
    cpu_with(monkeypatch, "avx512_bf16")
    out = ["--output-dir", str(tmp_path)]
    assert main_guard(run.main)([*TWO_HEADS, *out, "--precision", "bf16-mixed"]) == 0
    assert "precision bf16-mixed" in capsys.readouterr().out
    run_dir = tmp_path / "quadratic" / "version_0"
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["precision"] == "bf16-mixed"
    last = run_dir / "checkpoints" / "last.ckpt"
    assert run_config_of(read_checkpoint(last))["precision"] == "bf16-mixed"

    cpu_with(monkeypatch, "avx2")  # resumed with auto on a CPU without bf16: the run keeps bf16
    assert main_guard(run.main)([*TWO_HEADS, *out, "--resume", str(last)]) == 0
    captured = capsys.readouterr()
    assert "precision bf16-mixed" in captured.out and "no native bf16" in captured.err


def test_the_gpus_dense_peak(monkeypatch) -> None:
    monkeypatch.setattr(machine.torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    cuda = machine.torch.device("cuda")
    assert machine.peak_flops(cuda, "bf16-mixed") == pytest.approx(989.4e12)  # dense, not Lightning's sparse
    monkeypatch.setattr(
        machine.torch, "get_float32_matmul_precision", lambda: "high"
    )  # what runs set on CUDA
    assert machine.peak_flops(cuda, "32-true") == pytest.approx(494.7e12)  # TF32
    monkeypatch.setattr(machine.torch, "get_float32_matmul_precision", lambda: "highest")  # --no-tf32
    assert machine.peak_flops(cuda, "32-true") is None
    monkeypatch.setattr(machine.torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 PCIe")
    assert machine.peak_flops(cuda, "bf16-mixed") == pytest.approx(756.5e12)
    assert machine.peak_flops(machine.torch.device("cpu"), "bf16-mixed") is None


def test_every_command_flushes_denormals_before_it_computes():
    """Every command, once its arguments are checked, sets the CPU's flush-to-zero mode before it computes
    (``computing``: the math library's worker threads copy the mode when they start): in a fresh
    process, a denormal times one is zero after it."""
    import subprocess
    import sys

    probe = (
        "import torch; from experiments.cli import computing; {call}"
        "print(float((torch.tensor([1e-39]) * 1.0).item()))"
    )

    def after(call: str) -> float:
        out = subprocess.run(
            [sys.executable, "-c", probe.format(call=call)], cwd=REPO, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr[-2000:]
        return float(out.stdout.strip().splitlines()[-1])

    assert after("") == pytest.approx(1e-39, rel=1e-3)  # the default mode keeps denormals
    assert after("computing(); ") == 0.0
