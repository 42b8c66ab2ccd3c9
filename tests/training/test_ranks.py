"""Devices and ranks: more devices than the machine has is one line; DDP on a CPU evaluates the whole test
set once; a dead rank ends the other in one line naming it, and the run resumes exactly."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
from helpers import REPO, TEN_STEPS, call, one_line_error, run_cli, weights

from experiments import run
from sa_conv.training.signals import RankRecord, peer_lost


def test_more_devices_than_the_machine_has(capsys):
    code, _, err = call(run, ["quadratic", *TEN_STEPS, "--accelerator", "cpu", "--devices", "512"], capsys)
    assert "devices 512: this machine has" in one_line_error(code, err)


@pytest.mark.slow
def test_ddp_on_cpu_evaluates_the_whole_test_set_once(tmp_path):
    args = [
        "quadratic",
        *TEN_STEPS,
        "--epochs",
        "1",
        "--accelerator",
        "cpu",
        "--devices",
        "2",
        "--strategy",
        "ddp",
        "--output-dir",
        str(tmp_path),
    ]
    proc = run_cli(args)
    assert proc.wait(timeout=900) == 0, proc.stderr.read().decode()[-3000:]
    metrics = json.loads((tmp_path / "quadratic/version_0/metrics.json").read_text())
    assert metrics["devices"] == 2
    # the same checkpoint evaluated in one process over the whole test set gives the same accuracy
    out = subprocess.run(
        [sys.executable, "-m", "experiments.evaluate", metrics["best_checkpoint"], "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    single = json.loads(out.stdout.strip().splitlines()[-1])
    assert single["n_images"] == metrics["n_test_images"]
    assert single["accuracy"] == pytest.approx(metrics["test_acc"], abs=1e-6)


def test_a_rank_whose_sockets_closed_before_its_process_ended_is_named(tmp_path, monkeypatch):
    """A killed rank's connections close before its process is gone: the survivor waits a moment for it."""
    monkeypatch.setenv("MASTER_PORT", "29999")
    record = RankRecord(tmp_path)
    closed = RuntimeError("Connection closed by peer [127.0.0.1]:29999")
    ending = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    record.path(1).write_text(f"{socket.gethostname()} {ending.pid}")
    assert "stopped answering" in str(peer_lost(record, 0, 2, closed, grace_s=0))  # not yet gone
    assert "rank 1 of 2 is gone" in str(peer_lost(record, 0, 2, closed, grace_s=30))
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record.path(1).write_text(f"{socket.gethostname()} {alive.pid}")
        assert "a peer of rank 0 of 2 stopped answering" in str(peer_lost(record, 0, 2, closed, grace_s=0.3))
        assert peer_lost(record, 0, 2, ValueError("a shape mismatch"), grace_s=30) is None  # not about a peer
    finally:
        alive.kill()
        alive.wait()


@pytest.mark.slow
def test_a_dead_ddp_rank_ends_the_other_with_one_line_and_the_run_resumes_exactly(tmp_path):
    # 6 epochs of 26 steps: long enough that the run is still going when its first step checkpoint appears
    base = ["quadratic", *TEN_STEPS, "--epochs", "6", "--batch-size", "8", "--checkpoint-every", "5"]
    base += ["--accelerator", "cpu", "--devices", "2", "--strategy", "ddp", "--ddp-timeout", "1"]
    straight = run_cli([*base, "--output-dir", str(tmp_path / "a")])
    assert straight.wait(timeout=900) == 0, straight.stderr.read().decode()[-3000:]

    out = tmp_path / "b"
    killed = run_cli([*base, "--output-dir", str(out)])
    ckpt = out / "quadratic/version_0/checkpoints/step.ckpt"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not (ckpt.is_file() and list((out / ".ranks").glob("*-rank1.pid"))):
        time.sleep(0.01)
    assert killed.poll() is None, "the run ended before a rank could be killed mid-run"
    pid_file = next((out / ".ranks").glob("*-rank1.pid"))  # mid-epoch, past a step checkpoint
    os.kill(int(pid_file.read_text().split()[1]), signal.SIGKILL)  # rank 1 dies (the OOM killer, a lost node)
    start = time.monotonic()
    code = killed.wait(timeout=300)
    err = killed.stderr.read().decode()
    assert time.monotonic() - start < 120, "the surviving rank did not end in time"
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 1 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert "rank 1 of 2 is gone" in lines[0] and "--resume" in lines[0]

    resumed = run_cli([*base, "--output-dir", str(out), "--resume"])
    assert resumed.wait(timeout=900) == 0, resumed.stderr.read().decode()[-3000:]
    wa = weights(tmp_path / "a/quadratic/version_0/checkpoints/last.ckpt")
    wb = weights(out / "quadratic/version_0/checkpoints/last.ckpt")
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=0, atol=0, msg=k)
