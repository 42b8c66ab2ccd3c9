"""The GPU check scripts run on a bare machine: they parse, and a dry run on the CPU walks every step but
the CUDA ones (the benchmark, a bounded training run of the paper's recipe, the summary with MFU); the
paper's run in chunks, dry-run on the CPU, resumes after SIGKILLs to the weights of an unbroken run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import REPO, call, one_line_error
from helpers.processes import wait_for_step

from experiments import benchmark
from experiments.benchmark.tools import time_it

SCRIPTS = ["experiments/gpu_check.sh", "experiments/gpu_paper_quadratic.sh"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_scripts_parse(script):
    assert subprocess.run(["bash", "-n", str(REPO / script)], capture_output=True).returncode == 0


def test_a_benchmark_bounded_by_work_times_each_measurement_by_its_repeats(tmp_path, capsys):
    calls = []
    seconds = time_it(lambda: calls.append(torch.get_num_threads()), torch.device("cpu"), 60.0, repeats=3)
    assert calls == [torch.get_num_threads(), 1, 1, 1] and seconds < 60  # a warm-up, 3 timed on one thread
    report = tmp_path / "bench.json"
    argv = ["--device", "cpu", "--scale", "tiny", "--sections", "data", "--repeats", "2"]
    code, out, _ = call(benchmark, [*argv, "--json", str(report)], capsys)
    measured = json.loads(report.read_text())
    assert code == 0 and measured["repeats"] == 2 and measured["data"]["speedup"] > 0 and "data path" in out
    code, _, err = call(benchmark, ["--repeats", "0"], capsys)
    assert code == 2 and "--repeats" in one_line_error(code, err)


@pytest.mark.slow
def test_the_gpu_check_dry_run_on_the_cpu(tmp_path):
    proc = subprocess.run(
        ["bash", str(REPO / "experiments/gpu_check.sh"), "--device", "cpu", str(tmp_path)],
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
    """The test's own python3 first on PATH (the script calls python3, as on a bare machine), and the
    suite's CPU without native bf16 (conftest)."""
    return {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "SA_CONV_CPU_BF16": "emulated"}


# a one-layer model of the dry run's tiny scale for 3 epochs of 100 steps, a step checkpoint every 3 steps
# (the paper's protocol on 800 synthetic training images, their 200 test images every epoch): 20 s on 2 cores
CHUNK_ARGS = "--layers 1 --hidden 16 --heads 4 --epochs 3 --batch-size 8 --synthetic-size 800 "
CHUNK_ARGS += "--checkpoint-every 3 --figures-every none --snapshot-minutes 0 --no-explore"


def paper_chunks(out: Path) -> subprocess.Popen:
    """The chunk script's CPU dry run into ``out``, in a session of its own (its pid is the session's)."""
    return subprocess.Popen(
        ["bash", str(REPO / "experiments/gpu_paper_quadratic.sh"), "--device", "cpu", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={"HOME": str(out.parent), "EXTRA_ARGS": CHUNK_ARGS} | _python_path(),
        start_new_session=True,
    )


def session_processes(session: int) -> dict[int, list[str]]:
    """The processes of a session and their command lines (the script, timeout, the run, tee)."""
    found = {}
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text()
            argv = (proc / "cmdline").read_bytes().decode().split("\0")
        except (OSError, ValueError):
            continue  # not a process, or one that just ended
        if int(stat.rsplit(")", 1)[1].split()[3]) == session:
            found[int(proc.name)] = argv
    return found


def saved_step(ckpt: Path) -> int:
    """The global step ``ckpt`` holds (-1 while it is not written, or being replaced)."""
    try:
        return int(torch.load(ckpt, weights_only=False)["global_step"])
    except Exception:
        return -1


@pytest.mark.slow
def test_the_paper_chunks_resume_after_sigkills_to_the_weights_of_an_unbroken_run(tmp_path):
    straight = paper_chunks(tmp_path / "a")
    out, _ = straight.communicate(timeout=900)
    assert straight.returncode == 0 and "== every epoch is done" in out, out[-3000:]

    broken = paper_chunks(tmp_path / "b")
    ckpt = tmp_path / "b/runs/quadratic/version_0/checkpoints/step.ckpt"
    assert wait_for_step(broken, lambda: saved_step(ckpt), 60, 600), (
        "the script ended before it could be killed"
    )
    run = [pid for pid, argv in session_processes(broken.pid).items() if "python" in Path(argv[0]).name]
    assert len(run) == 1
    os.kill(run[0], signal.SIGKILL)  # the chunk dies without a checkpoint: the script starts the next one
    assert wait_for_step(broken, lambda: saved_step(ckpt), 180, 600), (
        "the resumed chunk did not reach step 180"
    )
    for pid in session_processes(broken.pid):  # the machine is lost: the script, timeout, the run, tee
        os.kill(pid, signal.SIGKILL)
    out, _ = broken.communicate(timeout=60)
    assert broken.returncode == -signal.SIGKILL
    assert "== chunk 1 was killed (SIGKILL, 1 in a row)" in out and "== chunk 2" in out
    assert out.count("resuming from") == 1

    again = paper_chunks(tmp_path / "b")  # run again, it resumes from the newest checkpoint
    out, _ = again.communicate(timeout=900)
    assert again.returncode == 0 and "== every epoch is done" in out, out[-3000:]
    assert "resuming from" in out and "Traceback" not in out
    a, b = (tmp_path / d / "runs/quadratic/version_0" for d in "ab")
    assert not (tmp_path / "b/runs/quadratic/version_1").exists()  # every chunk continued the one run
    ma, mb = (json.loads((d / "metrics.json").read_text()) for d in (a, b))
    assert ma["global_steps"] == mb["global_steps"] == 300
    assert ma["final_test_acc"] == mb["final_test_acc"]
    assert [h["test_acc"] for h in ma["history"]] == [h["test_acc"] for h in mb["history"]]
    wa, wb = (torch.load(d / "checkpoints/last.ckpt", weights_only=False)["state_dict"] for d in (a, b))
    assert wa.keys() == wb.keys()
    for name in wa:
        torch.testing.assert_close(wb[name], wa[name], rtol=0, atol=0, msg=name)
