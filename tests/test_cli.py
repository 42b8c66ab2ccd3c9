"""The command-line programs, run in-process through their one-line error guard."""

import json

import pytest
import torch

from experiments import convert, evaluate, run
from experiments.cli import main_guard

TINY = ["--scale", "tiny", "--layers", "1", "--hidden", "16", "--heads", "4", "--epochs", "1"]


def call(module, argv, capsys):
    code = main_guard(module.main)(argv)
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code, err):
    lines = [line for line in err.strip().splitlines() if line.startswith("error:")]
    assert code != 0
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    code = main_guard(run.main)(["quadratic", *TINY, "--synthetic", "--output-dir", str(out)])
    assert code == 0
    return out / "quadratic" / "version_0"


def test_run_writes_everything(synthetic_run):
    files = {p.name for p in synthetic_run.iterdir()}
    assert {"hparams.yaml", "metrics.json", "checkpoints"} <= files
    assert any(name.startswith("events.out.tfevents") for name in files)
    ckpts = {p.name for p in (synthetic_run / "checkpoints").iterdir()}
    assert "last.ckpt" in ckpts and any(name.startswith("best-") for name in ckpts)
    metrics = json.loads((synthetic_run / "metrics.json").read_text())
    assert metrics["model"] == "quadratic" and metrics["params"] > 0 and metrics["flops_per_image"] > 0
    assert 0.0 <= metrics["test_acc"] <= 1.0 and metrics["train_images_per_s"] > 0
    assert metrics["config"]["model_config"] == {
        "layers": 1,
        "hidden": 16,
        "ffn": 128,
        "attn_dropout": 0.0,
        "heads": 4,
    }
    assert "cpu" in metrics["hardware"]


def test_checkpoint_reloads_into_evaluate_with_the_same_accuracy(synthetic_run, capsys):
    metrics = json.loads((synthetic_run / "metrics.json").read_text())
    code, out, _ = call(evaluate, [metrics["best_checkpoint"], "--synthetic", "--json"], capsys)
    assert code == 0
    report = json.loads(out.strip().splitlines()[-1])
    assert report["accuracy"] == pytest.approx(metrics["test_acc"], abs=1e-6)
    assert report["n_images"] == metrics["n_test_images"] and report["params"] == metrics["params"]
    assert report["model"] == "quadratic"


def test_same_seed_same_metrics(tmp_path, synthetic_run):
    assert main_guard(run.main)(["quadratic", *TINY, "--synthetic", "--output-dir", str(tmp_path)]) == 0
    a = json.loads((tmp_path / "quadratic" / "version_0" / "metrics.json").read_text())
    b = json.loads((synthetic_run / "metrics.json").read_text())
    assert (a["test_acc"], a["best_val_acc"]) == (b["test_acc"], b["best_val_acc"])
    wa = torch.load(tmp_path / "quadratic/version_0/checkpoints/last.ckpt", weights_only=False)["state_dict"]
    wb = torch.load(synthetic_run / "checkpoints/last.ckpt", weights_only=False)["state_dict"]
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_resume_latest_continues_the_run(tmp_path, capsys):
    args = ["quadratic", *TINY[:-2], "--synthetic", "--output-dir", str(tmp_path)]
    assert main_guard(run.main)([*args, "--epochs", "1"]) == 0
    code, _, _ = call(run, [*args, "--epochs", "2", "--resume"], capsys)
    assert code == 0
    metrics = json.loads((tmp_path / "quadratic/version_0/metrics.json").read_text())
    assert metrics["epochs_completed"] == 2
    assert not (tmp_path / "quadratic/version_1").exists()


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["vit"], "unknown model 'vit'; valid models: resnet18"),
        (["quadratic", "--scale", "huge"], "unknown scale 'huge'"),
        (["quadratic", "--heads", "0"], "heads must be a positive integer"),
        (["resnet18", "--heads", "4"], "resnet18 has no option --heads"),
        (["quadratic", "--data-dir", "/nonexistent/cifar"], "does not exist"),
        (["quadratic", "--resume", "/nonexistent.ckpt"], "does not exist"),
    ],
)
def test_run_bad_input(argv, match, capsys):
    code, _, err = call(run, argv, capsys)
    assert match in one_line_error(code, err)


def test_run_unknown_option(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main_guard(run.main)(["quadratic", "--bogus"])
    _, err = capsys.readouterr()
    assert exit_info.value.code == 2
    assert err.count("\n") == 1 and "unrecognized arguments: --bogus" in err


def test_run_empty_and_classless_data_dir(tmp_path, capsys):
    code, _, err = call(run, ["quadratic", *TINY, "--data-dir", str(tmp_path)], capsys)
    assert "is empty" in one_line_error(code, err)
    (tmp_path / "train" / "cat").mkdir(parents=True)
    (tmp_path / "test").mkdir()
    code, _, err = call(
        run, ["quadratic", *TINY, "--data-dir", str(tmp_path), "--output-dir", str(tmp_path / "o")], capsys
    )
    assert str(tmp_path / "train") in one_line_error(code, err)


def test_evaluate_rejects_foreign_files(tmp_path, capsys):
    junk = tmp_path / "junk.ckpt"
    junk.write_bytes(b"\x00garbage")
    code, _, err = call(evaluate, [str(junk), "--synthetic"], capsys)
    assert "not a readable checkpoint" in one_line_error(code, err)
    foreign = tmp_path / "foreign.ckpt"
    torch.save({"state_dict": {}, "epoch": 3}, foreign)
    code, _, err = call(evaluate, [str(foreign), "--synthetic"], capsys)
    assert "not an sa-conv checkpoint" in one_line_error(code, err)
    code, _, err = call(evaluate, [str(tmp_path / "missing.ckpt")], capsys)
    assert "does not exist" in one_line_error(code, err)


def test_evaluate_rejects_another_version(tmp_path, synthetic_run, capsys):
    ckpt = torch.load(synthetic_run / "checkpoints/last.ckpt", weights_only=False)
    ckpt["sa_conv_version"] = "0.0.1"
    path = tmp_path / "old.ckpt"
    torch.save(ckpt, path)
    code, _, err = call(evaluate, [str(path), "--synthetic"], capsys)
    assert "written by sa-conv 0.0.1" in one_line_error(code, err)


def test_convert_pass_and_fail(capsys):
    argv = ["--kernel-size", "3,2", "--stride", "2", "--dilation", "2", "--padding", "2"]
    code, out, _ = call(convert, argv, capsys)
    assert code == 0 and "heads used: 6" in out and out.strip().endswith("PASS")
    code, out, _ = call(convert, ["--alpha", "1"], capsys)
    assert code == 1 and out.strip().endswith("FAIL")
    code, out, _ = call(
        convert, ["--dims", "1", "--kernel-size", "5", "--padding", "same", "--groups", "8"], capsys
    )
    assert code == 0 and "heads used: 5" in out


def test_convert_sweep(capsys):
    code, out, _ = call(
        convert, ["--sweep-alpha", "--in-channels", "2", "--out-channels", "2", "--size", "6"], capsys
    )
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert code == 0 and [int(r[0]) for r in rows] == list(range(1, 101))
    assert rows[0][-1] == "FAIL" and rows[-1][-1] == "PASS" and float(rows[-1][2]) < 1e-6


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--kernel-size", "5", "--max-heads", "16"], "needs 25 heads, more than max_heads=16"),
        (["--groups", "3"], "invalid convolution"),
        (["--kernel-size", "9", "--padding", "0", "--size", "4"], "cannot run"),
    ],
)
def test_convert_bad_input(argv, match, capsys):
    code, _, err = call(convert, argv, capsys)
    assert match in one_line_error(code, err)


def test_convert_a_trained_resnet_layer(tmp_path, capsys):
    argv = ["resnet18", "--scale", "tiny", "--epochs", "1", "--synthetic", "--output-dir", str(tmp_path)]
    assert main_guard(run.main)(argv) == 0
    ckpt = str(tmp_path / "resnet18/version_0/checkpoints/last.ckpt")
    capsys.readouterr()
    code, out, _ = call(convert, ["--checkpoint", ckpt, "--layer", "layers.2.conv1"], capsys)
    assert code == 0 and "heads used: 9" in out and out.strip().endswith("PASS")
    code, _, err = call(convert, ["--checkpoint", ckpt, "--layer", "fc"], capsys)
    assert "no Conv2d named 'fc'" in one_line_error(code, err)


def test_limit_train_batches_counts_or_fractions(tmp_path):
    for limit, steps in (("2", 4), ("0.4", 4)):  # 410 images / 100 = 5 batches per epoch; 2 epochs
        out = tmp_path / limit
        argv = ["quadratic", *TINY[:-2], "--epochs", "2", "--synthetic", "--limit-train-batches", limit]
        assert main_guard(run.main)([*argv, "--no-figures", "--output-dir", str(out)]) == 0
        assert json.loads((out / "quadratic/version_0/metrics.json").read_text())["global_steps"] == steps
