"""The GPU check scripts run on a bare machine: they parse, and a dry run on the CPU walks every step but
the CUDA ones (the benchmark, a bounded training run of the paper's recipe, the summary with MFU)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ["experiments/gpu_check.sh", "experiments/gpu_paper_quadratic.sh"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_scripts_parse(script):
    assert subprocess.run(["bash", "-n", str(ROOT / script)], capture_output=True).returncode == 0


@pytest.mark.slow
def test_the_gpu_check_dry_run_on_the_cpu(tmp_path):
    proc = subprocess.run(
        ["bash", str(ROOT / "experiments/gpu_check.sh"), "--device", "cpu", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)} | _python_path(),
    )
    log = (tmp_path / "gpu-check.log").read_text()
    assert proc.returncode == 0, log[-3000:]
    for section in ("== machine", "== data", "== benchmark", "== training", "== summary"):
        assert section in log
    assert "steady-state training:" in log and "MFU" in log and "Traceback" not in log
    assert {"gpu-check.log", "benchmark.json", "train-metrics.json"} <= {p.name for p in tmp_path.iterdir()}
    metrics = json.loads((tmp_path / "train-metrics.json").read_text())
    assert metrics["protocol"] == "paper" and metrics["train_images_per_s"] > 0


def _python_path() -> dict[str, str]:
    """The test's own python3 first on PATH (the script calls python3, as on a bare machine)."""
    import sys

    return {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
