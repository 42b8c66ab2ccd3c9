"""The command-line programs, run in-process through their one-line error guard."""

import dataclasses
import json

import pytest
import torch
import yaml
from helpers import TINY, call, one_line_error, tiny, train

from experiments import convert, evaluate, run
from experiments.cli import main_guard
from sa_conv.data.config import DataConfig
from sa_conv.models import MODELS
from sa_conv.training.config import RunConfig, RunOptions
from sa_conv.utils.schedule import OptimConfig


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory):
    """A tiny run of one epoch on 512 synthetic images, with every file a run writes."""
    return train(tmp_path_factory.mktemp("runs"), "quadratic", *TINY, "--synthetic")


def test_run_writes_everything(synthetic_run):
    files = {p.name for p in synthetic_run.iterdir()}
    assert {"hparams.yaml", "config.yaml", "metrics.json", "checkpoints"} <= files
    assert any(name.startswith("events.out.tfevents") for name in files)
    ckpts = {p.name for p in (synthetic_run / "checkpoints").iterdir()}
    assert "last.ckpt" in ckpts and any(name.startswith("best-") for name in ckpts)
    metrics = json.loads((synthetic_run / "metrics.json").read_text())
    assert metrics["model"] == "quadratic" and metrics["params"] > 0 and metrics["train_flops_per_image"] > 0
    assert 0.0 <= metrics["test_acc"] <= 1.0 and metrics["train_images_per_s"] > 0
    model_config = metrics["config"]["model_config"]
    assert (model_config["layers"], model_config["hidden"], model_config["heads"]) == (1, 16, 4)
    assert model_config["attn_dropout"] == 0.0 and model_config["init"] == "paper"  # the tiny preset's
    assert metrics["history"][0]["epoch"] == 1 and "val_acc" in metrics["history"][0]
    assert "cpu" in metrics["hardware"] and metrics["protocol"] == "clean"


def test_checkpoint_reloads_into_evaluate_with_the_checkpoints_own_data(synthetic_run, capsys):
    metrics = json.loads((synthetic_run / "metrics.json").read_text())
    code, out, _ = call(evaluate, [metrics["best_checkpoint"], "--json"], capsys)  # no data flag: the run's
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
    wa = torch.load(tmp_path / "quadratic/version_0/checkpoints/last.ckpt", weights_only=True)["state_dict"]
    wb = torch.load(synthetic_run / "checkpoints/last.ckpt", weights_only=True)["state_dict"]
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_a_runs_saved_config_repeats_it_exactly(synthetic_run, capsys):
    saved = synthetic_run / "config.yaml"
    original = RunConfig.from_dict(yaml.safe_load(saved.read_text()))
    code, out, _ = call(run, ["--config", str(saved), "--print-config"], capsys)
    assert code == 0 and RunConfig.from_dict(yaml.safe_load(out)) == original
    metrics = json.loads((synthetic_run / "metrics.json").read_text())
    assert RunConfig.from_dict(metrics["config"]) == original


def test_print_config_round_trips_through_config(tmp_path, capsys):
    code, out, _ = call(
        run, ["learned", "--scale", "small", "--heads", "16", "--lr", "0.05", "--print-config"], capsys
    )
    assert code == 0
    printed = RunConfig.from_dict(yaml.safe_load(out))
    assert printed == RunConfig(
        model="learned", scale="small", model_config=printed.model_config, optim={"lr": 0.05}, epochs=15
    )
    assert printed.model_config.heads == 16 and printed.model_config.hidden == 64
    assert yaml.safe_load(out)["optim"]["lr"] == 0.05  # one mapping per part of the config
    path = tmp_path / "c.yaml"
    path.write_text(out)
    code, again, _ = call(run, ["--config", str(path), "--print-config"], capsys)
    assert code == 0 and again == out
    code, over, _ = call(
        run, ["--config", str(path), "--epochs", "2", "--no-content", "--print-config"], capsys
    )
    assert RunConfig.from_dict(yaml.safe_load(over)) == printed.replace(epochs=2)  # flags win over the file


@pytest.mark.parametrize("model", list(MODELS))
def test_every_config_field_is_a_flag(model):
    base = run.base_config([model])
    parser = run.build_parser(base)
    flags = {s for action in parser._actions for s in action.option_strings}
    family = MODELS[model].family
    top = ("model", "scale", "model_config", "optim", "data")
    parts = ((family, ()), (RunConfig, top), (OptimConfig, ()), (DataConfig, ()), (RunOptions, ()))
    for cls, skip in parts:
        for field in dataclasses.fields(cls):
            if field.name not in skip:
                assert "--" + field.name.replace("_", "-") in flags, (cls.__name__, field.name)


def test_help_shows_the_presets_values(capsys):
    code, out, _ = call(run, ["quadratic", "--scale", "tiny", "--help"], capsys)
    assert code == 0
    assert "(default: 3)" in " ".join(out.split())  # --epochs of the tiny preset, not the paper's 300
    assert "--attn-dropout" in out and "--weight-decay" in out and "--warmup" in out


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["vit"], "unknown model 'vit'; valid models: resnet18"),
        (["quadratic", "--scale", "huge"], "unknown scale 'huge'"),
        (["quadratic", "--heads", "0"], "heads must be an integer from 1 to 1,024"),
        (["resnet18", "--heads", "4"], "resnet18 has no option --heads (it is an option of every SA model"),
        (["quadratic", "--width", "4"], "quadratic has no option --width (it is an option of resnet18)"),
        (["quadratic", "--conv-kernel", "5"], "conv_kernel is an option of attention='mixed'"),
        (["quadratic", "--window", "3"], "window is an option of encoding='composite'"),
        (["quadratic", "--epochs", "0"], "epochs must be an integer from 1 to 100,000"),
        (["quadratic", "--train-subset", "-5"], "train_subset must be an integer from 1 to"),
        (["quadratic", "--val-size", "-10"], "val_size must be from 0 to"),
        (["quadratic", "--limit-train-batches", "0"], "limit_train_batches must be"),
        (["quadratic", "--limit-train-batches", "1.5"], "limit_train_batches must be"),
        (["quadratic", "--lr", "nan"], "nan is not a number"),
        (["quadratic", "--lr", "inf"], "lr must be in (0, 100]"),
        (["quadratic", "--batch-size", "0"], "batch_size must be an integer from 1 to"),
        (["quadratic", "--precision", "64-true"], "--precision: invalid choice: '64-true'"),
        (["quadratic", "--accelerator", "tpu"], "accelerator must be one of"),
        (["quadratic", "--devices", "0"], "devices must be an integer from 1 to 1024 or auto"),
        (["quadratic", "--figures-every", "0"], "figures_every must be an integer from 1 to"),
        (["quadratic", "--max-time", "ten minutes"], "max_time must be DD:HH:MM:SS"),
        (["quadratic", "--attn-dropout", "1.5"], "attn_dropout must be in [0, 1)"),
        (["quadratic", "--encoding", "sinusoid"], "encoding must be one of quadratic, gaussian"),
        (["quadratic", "--data-dir", "/nonexistent/cifar"], "does not exist"),
        (["quadratic", "--resume", "/nonexistent.ckpt"], "does not exist"),
        (["quadratic", "--config", "/nonexistent.yaml"], "config file /nonexistent.yaml does not exist"),
        (["--print-config"], "required: model"),
        (["mixed", "--head-ratio", "0"], "head_ratio must be an integer from 1 to"),
        (["composite", "--window", "-1"], "window must be an integer from 0 to"),
        (["mixed", "--conv-kernel", "4"], "conv_kernel must be odd"),
        (["quadratic", "--init-std", "0"], "init_std must be in (0, 10]"),
        (["quadratic", "--layer-heads", "9"], "layer_heads must be 6 positive integers"),
        (
            ["quadratic", "--epochs", "100000000000000"],
            "epochs must be an integer from 1 to 100,000, got 100000",
        ),
        (["quadratic", "--lr", "1e308"], "lr must be in (0, 100], got 1e+308"),
        (["quadratic", "--layers", "1000000000"], "layers must be an integer from 1 to 256, got 1000000000"),
        (["quadratic", "--hidden", "99999999999999999999"], "hidden must be an integer from 1 to 16,384"),
        (["resnet18", "--blocks", "2", "2", "100000"], "blocks must be 1 to 8 stages of 1 to 64 blocks"),
        (["--epochs", "2", "--print-config"], "required: model"),
    ],
)
def test_run_bad_input(argv, match, capsys):
    code, _, err = call(run, argv, capsys)
    assert match in one_line_error(code, err)


def test_run_bad_config_files(tmp_path, capsys):
    cases = {
        "bad.yaml": ("model: [unclosed", "is not valid YAML"),
        "unknown.yaml": ("model: quadratic\nwidth_of_things: 3\n", "has no option width_of_things"),
        "typed.yaml": ("model: quadratic\nepochs: three\n", "epochs must be an integer"),
        "list.yaml": ("- 1\n- 2\n", "must be a mapping"),
        "empty.yaml": ("", "is empty"),
        "binary.yaml": (b"\xab\x00\xff", "is not a text (YAML) file"),
        "nomodel.yaml": ("epochs: 3\n", "needs model"),
        "typed-model.yaml": (
            "model: quadratic\nmodel_config: {dropout: '0.1'}\n",
            "dropout must be a number",
        ),
        "misplaced.yaml": ("model: quadratic\nheads: 16\n", "heads: it belongs under model_config"),
        "misspelled.yaml": ("model: quadratic\nmodel_config: {heds: 16}\n", "has no option heds"),
    }
    for name, (text, match) in cases.items():
        path = tmp_path / name
        path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
        code, _, err = call(run, ["--config", str(tmp_path / name)], capsys)
        assert match in one_line_error(code, err), name
    (tmp_path / "good.yaml").write_text("model: quadratic\n")
    code, _, err = call(run, ["learned", "--config", str(tmp_path / "good.yaml")], capsys)
    assert "the model 'learned' differs from" in one_line_error(code, err)
    code, _, err = call(run, ["--config", str(tmp_path / "good.yaml"), "--scale", "tiny"], capsys)
    assert "--scale and --config" in one_line_error(code, err)
    lists = tmp_path / "lists.yaml"  # YAML lists and ints typed as the config says
    lists.write_text("model: quadratic\nlr: 1\nmodel_config: {layers: 2, layer_heads: [3, 4]}\n")
    code, out, _ = call(run, ["--config", str(lists), "--print-config"], capsys)
    config = RunConfig.from_dict(yaml.safe_load(out))
    assert code == 0 and config.model_config.layer_heads == (3, 4) and config.optim.lr == 1.0


def test_flags_before_the_model_and_word_values(capsys):
    code, out, _ = call(run, ["--resume", "auto", "quadratic", "--devices", "auto", "--print-config"], capsys)
    assert code == 0 and yaml.safe_load(out)["model"] == "quadratic"
    code, out, _ = call(run, ["--epochs", "2", "learned", "--print-config"], capsys)
    assert code == 0 and yaml.safe_load(out)["model"] == "learned" and yaml.safe_load(out)["epochs"] == 2


def test_run_unknown_option(capsys):
    code, _, err = call(run, ["quadratic", "--bogus"], capsys)
    assert code == 2 and err.count("\n") == 1 and "unrecognized arguments: --bogus" in err


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda tmp: tmp / "file", "is a file, not a directory"),  # --output-dir an existing file
        (lambda tmp: tmp / "file" / "below", "is not writable"),  # a folder under a file
    ],
)
def test_run_bad_output_dir(tmp_path, capsys, make, match):
    (tmp_path / "file").write_text("x")
    code, _, err = call(run, ["quadratic", *TINY, "--synthetic", "--output-dir", str(make(tmp_path))], capsys)
    assert match in one_line_error(code, err)


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
    code, _, err = call(evaluate, [str(tmp_path)], capsys)
    assert "is a directory" in one_line_error(code, err)


def test_evaluate_rejects_another_version(tmp_path, synthetic_run, capsys):
    ckpt = torch.load(synthetic_run / "checkpoints/last.ckpt", weights_only=True)
    ckpt["sa_conv_version"] = "0.0.1"
    path = tmp_path / "old.ckpt"
    torch.save(ckpt, path)
    code, _, err = call(evaluate, [str(path), "--synthetic"], capsys)
    assert "written by sa-conv 0.0.1" in one_line_error(code, err)


def test_evaluate_needs_the_checkpoints_data_or_a_data_dir(tmp_path, capsys):
    ckpt = tmp_path / "moved.ckpt"
    out = tmp_path / "runs"
    argv = ["quadratic", *TINY, "--synthetic", "--output-dir", str(out)]
    assert main_guard(run.main)(argv) == 0
    state = torch.load(out / "quadratic/version_0/checkpoints/last.ckpt", weights_only=True)
    state["datamodule_hyper_parameters"].update(source="auto", data_dir=str(tmp_path / "gone"))
    torch.save(state, ckpt)
    capsys.readouterr()
    code, _, err = call(evaluate, [str(ckpt)], capsys)
    line = one_line_error(code, err)
    assert "trained on" in line and "gone" in line and "--data-dir" in line


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
    first = int(out.split("first alpha within 1e-05: ")[1].split()[0])
    assert code == 0 and [int(r[0]) for r in rows] == sorted({1, 5, 10, 25, 46, 100, first - 1, first})
    assert rows[0][-1] == "FAIL" and rows[-1][-1] == "PASS" and float(rows[-1][2]) < 1e-6
    threshold = {int(r[0]): r[-1] for r in rows}
    assert threshold[first - 1] == "FAIL" and threshold[first] == "PASS"
    assert "None" not in out


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--kernel-size", "5", "--max-heads", "16"], "needs 25 heads, more than max_heads=16"),
        (["--groups", "3"], "invalid convolution"),
        (["--kernel-size", "9", "--padding", "0", "--size", "4"], "cannot run"),
        (["--batch", "0"], "must be a positive integer"),
        (["--dilation", "0"], "--dilation: every value must be >= 1"),
        (["--stride", "1,0"], "--stride: every value must be >= 1"),
        (["--kernel-size", "3,x"], "expected K or Kh,Kw"),
        (["--padding", "-1"], "--padding: every value must be >= 0"),
        (["--alpha", "inf"], "alpha must be positive and finite"),
        (["--figure", "TMP"], "is a folder: name a file in it"),
    ],
)
def test_convert_bad_input(argv, match, capsys, tmp_path):
    argv = [str(tmp_path) if a == "TMP" else a for a in argv]
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
    report = tmp_path / "all.json"
    code, out, _ = call(convert, ["--checkpoint", ckpt, "--all", "--json", str(report)], capsys)
    result = json.loads(report.read_text())
    assert code == 0 and "converted 20 convolutions" in out
    assert result["accuracy_attention"] == result["accuracy_conv"] and result["agreement"] == 1.0
    assert result["max_rel_logit_diff"] < 1e-4 and result["attention_heads"] == 9 * 17 + 3
    code, _, err = call(convert, ["--checkpoint", ckpt, "--to-conv"], capsys)
    assert "has no attention layers" in one_line_error(code, err)
    assert main_guard(run.main)(["mixed", *TINY, "--synthetic", "--output-dir", str(tmp_path)]) == 0
    capsys.readouterr()
    mixed_ckpt = str(tmp_path / "mixed/version_0/checkpoints/last.ckpt")
    code, _, err = call(convert, ["--checkpoint", mixed_ckpt, "--to-conv"], capsys)
    assert "needs Gaussian heads without content, got MixedAttention2d" in one_line_error(code, err)


def test_convert_trained_attention_to_convolutions(synthetic_run, tmp_path, capsys):
    ckpt = str(synthetic_run / "checkpoints/last.ckpt")
    report = tmp_path / "to-conv.json"
    code, out, _ = call(
        convert, ["--checkpoint", ckpt, "--to-conv", "--layers", "1", "--json", str(report)], capsys
    )
    result = json.loads(report.read_text())
    assert code == 0 and "layer 1: conv-likeness of each head" in out
    assert len(result["layers"][0]["conv_likeness"]) == 4 and 0 <= result["accuracy_conv"] <= 1
    code, _, err = call(convert, ["--checkpoint", ckpt, "--to-conv", "--layers", "3"], capsys)
    assert "--layers must be in 1..1" in one_line_error(code, err)
    code, _, err = call(convert, ["--all"], capsys)
    assert "need --checkpoint" in one_line_error(code, err)


@pytest.mark.parametrize(("limit", "steps"), [("1", 2), ("2", 4), ("0.4", 4), ("1.0", 10)])
def test_limit_train_batches_counts_or_fractions(tmp_path, limit, steps):
    # 410 synthetic training images / 100 = 5 batches per epoch; 2 epochs
    argv = ["quadratic", *tiny(epochs=2), "--synthetic", "--limit-train-batches", limit]
    assert main_guard(run.main)([*argv, "--figures-every", "none", "--output-dir", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "quadratic/version_0/metrics.json").read_text())["global_steps"] == steps
