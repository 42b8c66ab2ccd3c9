"""A NaN loss stops the run in one line naming the step, and keeps the last good checkpoint."""

import torch
from helpers import TEN_STEPS, call, one_line_error

from experiments import run


def test_nan_loss_stops_naming_the_step_and_keeps_the_last_good_checkpoint(tmp_path, capsys, monkeypatch):
    import torch.nn.functional as F

    real, calls = F.cross_entropy, {"train": 0}

    def poisoned(logits, labels, *args, **kwargs):  # the 14th training loss is NaN
        loss = real(logits, labels, *args, **kwargs)
        if torch.is_grad_enabled():
            calls["train"] += 1
            if calls["train"] == 14:
                return loss * float("nan")
        return loss

    monkeypatch.setattr(F, "cross_entropy", poisoned)
    code, _, err = call(
        run, ["quadratic", *TEN_STEPS, "--epochs", "3", "--output-dir", str(tmp_path)], capsys
    )
    assert "training loss became nan at step 13" in one_line_error(code, err)
    checkpoints = tmp_path / "quadratic/version_0/checkpoints"
    last = torch.load(checkpoints / "last.ckpt", weights_only=True)
    assert last["global_step"] == 10  # the end of epoch 1: the last good state
    assert torch.isfinite(torch.cat([v.flatten().float() for v in last["state_dict"].values()])).all()
    assert not (checkpoints / "interrupted.ckpt").exists()
