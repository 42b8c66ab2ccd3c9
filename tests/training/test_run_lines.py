"""What a newcomer sees around a resume and a stop: the progress bar after a resume mid-epoch names the
epoch of the run's total and counts the epoch's batches; resuming a finished run says so; a signal while
the command starts up ends it with one line."""

import re
import signal
import time

import pytest
from helpers import TEN_STEPS, StepCounter, call, one_line_stop, run_cli, with_callback

from experiments import run


def test_the_bar_after_a_resume_mid_epoch_shows_the_epoch_of_the_total(tmp_path, monkeypatch, capsys):
    argv = ["quadratic", *TEN_STEPS, "--epochs", "3", "--output-dir", str(tmp_path), "--progress", "bar"]
    with monkeypatch.context() as patch:
        with_callback(patch, StepCounter(14, "crash"))  # 4 batches into epoch 2
        with pytest.raises(RuntimeError, match="went away"):
            run.main([*argv, "--snapshot-minutes", "1e-9"])
    capsys.readouterr()
    code, out, err = call(run, [*argv, "--resume"], capsys)
    assert code == 0
    shown = out + err
    # the resumed epoch, of 3, counts its 10 batches from where it stopped (Lightning's own: "Epoch 1", 6/?)
    assert re.search(r"Epoch 2/3: +\d+%\|[^|]*\| *(5|6|7|8|9|10)/10 ", shown), shown[-2000:]
    assert re.search(r"Epoch 3/3: +100%\|[^|]*\| *10/10 ", shown), shown[-2000:]
    assert not re.search(r"Training: [^\n\r]*[1-9]\d*/\?", shown)  # no batch counted without its total


def test_resuming_a_finished_run_says_it_had_finished(tmp_path, capsys):
    argv = ["quadratic", *TEN_STEPS, "--epochs", "1", "--output-dir", str(tmp_path)]
    assert call(run, argv, capsys)[0] == 0
    code, out, _ = call(run, [*argv, "--resume"], capsys)
    assert code == 0
    assert "the run had finished training (step 10 of 10): it is tested again" in out


@pytest.mark.parametrize(("sent", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_while_starting_up_ends_the_command_with_one_line(tmp_path, sent, code):
    process = run_cli(["quadratic", *TEN_STEPS, "--epochs", "1", "--output-dir", str(tmp_path)])
    time.sleep(1.0)  # the arguments are checked in a tenth of a second; torch and Lightning load for seconds
    process.send_signal(sent)
    _, err = process.communicate(timeout=120)
    text = err.decode()
    assert process.returncode == code, text[-1200:]
    if sent == signal.SIGTERM:
        assert "outside training" in one_line_stop(process.returncode, text)
    else:
        assert text.strip().splitlines() == ["error: interrupted"], text[-1200:]
    assert not (tmp_path / "quadratic").exists()  # nothing was written
