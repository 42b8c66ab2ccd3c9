"""Shipped weights, their manifest and their history are files from anywhere: each malformed one is refused
in one line naming the file and what is wrong, before anything reads it, and nothing outside ``weights/``
is loaded by name."""

from __future__ import annotations

import json
import os
import pickle
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import call, one_line_error
from safetensors import safe_open
from safetensors.torch import save_file

import sa_conv
from experiments import evaluate, figures, models
from sa_conv.analysis.snapshots import history_json
from sa_conv.models.weights import manifest, read_weights, save_weights, sha256_of, weights_dir
from sa_conv.training.trained import load_trained
from sa_conv.utils.files import atomic_write
from sa_conv.utils.safe_load import CheckpointError, load_checkpoint_file

NAME = "tiny/quadratic-seed0"
CONFIG = {"layers": 1, "hidden": 16, "heads": 4, "ffn": 16, "image_size": 8}
LAYER = {"mean_distance": [1.0] * 4, "peak_mass": [0.5] * 4, "overlap": 0.1, "coverage": 3}
SNAPSHOT = {"step": 0, "layers": [LAYER]}


@pytest.fixture
def weights() -> Path:
    """A small quadratic model's weights shipped as ``NAME`` in this test's weights folder."""
    backbone = sa_conv.create_model("quadratic", **CONFIG)
    path = weights_dir() / f"{NAME}.safetensors"
    hparams = {"model": "quadratic", "model_config": CONFIG}
    save_weights(path, backbone, hyper_parameters=hparams, run_config={}, history=[SNAPSHOT], step=3)
    entry = {"model": "quadratic", "scale": "tiny", "seed": 0, "precision": "32-true", "epochs": 1}
    entry |= {"test_acc": 0.5, "n_test_images": 8, "params": 1, "file": f"{NAME}.safetensors"}
    entry |= {"bytes": path.stat().st_size, "sha256": sha256_of(path), "config": {}}
    (weights_dir() / "manifest.json").write_text(json.dumps({NAME: entry}))
    return path


def edit_manifest(change: Any) -> None:
    """Rewrite the manifest: ``change(models)`` edits it in place or returns what to write instead."""
    path = weights_dir() / "manifest.json"
    models = json.loads(path.read_text())
    written = change(models)
    written = models if written is None else written
    path.write_text(written if isinstance(written, str) else json.dumps(written))


def test_the_fixture_loads_by_name_and_by_path(weights: Path) -> None:
    """What the faults below break: a valid manifest and file load, by name, by path and as a ``Path``."""
    for spec in (NAME, Path(NAME), weights):
        backbone = sa_conv.load_pretrained(spec)
        assert not backbone.training and backbone.config.hidden == 16
    assert history_json(load_trained(NAME).history or []) == [SNAPSHOT]


def drop(models: dict[str, Any], field: str) -> None:
    """Remove ``field`` from the entry of ``NAME`` (in place: the manifest is written as edited)."""
    del models[NAME][field]


MANIFEST_FAULTS = {
    "not JSON": (lambda m: "{ not json", "is not valid JSON"),
    "a list": (lambda m: list(m.values()), "must be an object of model entries by name, not a list"),
    "null": (lambda m: "null", "not null"),
    "an entry that is a string": (lambda m: {NAME: "x.safetensors"}, f"entry '{NAME}' is a string"),
    "an entry without its file": (lambda m: drop(m, "file"), f"entry '{NAME}' has no 'file'"),
    "an entry without its sha256": (lambda m: drop(m, "sha256"), "has no 'sha256'"),
    "a file that is a number": (lambda m: m[NAME].update(file=5), "has a number as 'file', not a string"),
    "no run config": (lambda m: drop(m, "config"), "has no 'config'"),
    "an accuracy that is a string": (lambda m: m[NAME].update(test_acc="high"), "a string as 'test_acc'"),
    "a seed that is a boolean": (lambda m: m[NAME].update(seed=True), "has a boolean as 'seed'"),
}


@pytest.mark.parametrize("fault", MANIFEST_FAULTS)
def test_a_malformed_manifest_is_refused_naming_it(
    weights: Path, fault: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The library and the commands name the manifest and what is wrong with it, in one line."""
    change, message = MANIFEST_FAULTS[fault]
    edit_manifest(change)
    with pytest.raises(CheckpointError, match=r"manifest\.json") as err:
        manifest()
    assert message in str(err.value)
    for command, argv in ((evaluate, [NAME, "--synthetic"]), (models, [])):
        line = one_line_error(*call(command, argv, capsys)[::2])
        assert "manifest.json" in line and message in line


def test_a_manifest_entry_names_no_file_outside_the_weights_folder(weights: Path, tmp_path: Path) -> None:
    """Only a relative .safetensors path below the weights folder is read, however the file's sha256 fits."""
    outside = tmp_path / "elsewhere.safetensors"
    outside.write_bytes(weights.read_bytes())  # a valid weights file, its sha256 the manifest's
    relative = f"../{outside.parent.name}/{outside.name}"
    for file in (str(outside), relative, "tiny/../../elsewhere.safetensors"):
        edit_manifest(lambda m, file=file: m[NAME].update(file=file))
        with pytest.raises(CheckpointError, match=r"must be a relative \.safetensors path inside"):
            sa_conv.load_pretrained(NAME)
    weights.with_suffix(".ckpt").write_bytes(weights.read_bytes())
    edit_manifest(lambda m: m[NAME].update(file=f"{NAME}.ckpt"))
    with pytest.raises(CheckpointError, match=r"must be a relative \.safetensors path inside"):
        sa_conv.load_pretrained(NAME)


@pytest.mark.parametrize("link", ["folder", "file"])
def test_a_symlink_leading_out_of_the_weights_folder_is_refused(
    weights: Path, tmp_path: Path, link: str
) -> None:
    """A scale folder or a weights file linked in from elsewhere is outside the weights folder, its sha256
    the manifest's or not: refused, naming the way a shared store is meant to be named."""
    store = tmp_path / "store"
    moved = weights.parent if link == "folder" else weights
    moved.rename(store)
    moved.symlink_to(store, target_is_directory=link == "folder")
    with pytest.raises(
        CheckpointError, match=r"path inside the weights folder, not led out of it by a symlink"
    ):
        sa_conv.load_pretrained(NAME)


def test_a_shared_store_named_by_the_environment_loads(
    weights: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The way to keep weights elsewhere: ``SA_CONV_WEIGHTS`` names the store itself."""
    store = weights_dir().parent / "store"
    weights_dir().rename(store)
    monkeypatch.setenv("SA_CONV_WEIGHTS", str(store))
    assert not sa_conv.load_pretrained(NAME).training


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool])
def test_weights_stored_as_integers_are_refused_before_loading(weights: Path, tmp_path: Path, dtype) -> None:
    """Float bytes relabelled as integers (or any integer tensor where the model has floats) load as
    nonsense: refused naming the tensor and both dtypes, whichever path reads them."""
    with safe_open(str(weights), framework="pt") as f:
        metadata = dict(f.metadata())
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)
    name = next(iter(tensors))
    tensors[name] = (
        tensors[name].view(torch.int32).to(dtype) if dtype != torch.int32 else tensors[name].view(dtype)
    )
    relabelled = tmp_path / "relabelled.safetensors"
    save_file(tensors, str(relabelled), metadata=metadata)
    with pytest.raises(
        CheckpointError, match=rf"dtype mismatch for {name}: {dtype} in the file, torch.float32 in the model"
    ):
        sa_conv.load_pretrained(relabelled)


def test_a_tensor_of_another_shape_is_refused_naming_it(weights: Path, tmp_path: Path) -> None:
    with safe_open(str(weights), framework="pt") as f:
        metadata = dict(f.metadata())
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)
    name = next(iter(tensors))
    tensors[name] = torch.zeros(3, 5)
    reshaped = tmp_path / "reshaped.safetensors"
    save_file(tensors, str(reshaped), metadata=metadata)
    with pytest.raises(CheckpointError, match=rf"size mismatch for {name}: \(3, 5\) in the file"):
        sa_conv.load_pretrained(reshaped)


def test_models_json_is_strict_json_where_a_number_is_not_finite(weights: Path, capsys) -> None:
    edit_manifest(lambda m: m[NAME].update(test_acc=float("nan")))
    code, out, _ = call(models, ["--json"], capsys)
    assert code == 0
    parsed = json.loads(out, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    assert parsed[NAME]["test_acc"] is None
    code, out, _ = call(models, [], capsys)
    assert code == 0 and NAME in out


def rewrite_metadata(path: Path, **changes: str | None) -> Path:
    """A copy of weights file ``path`` whose metadata fields are replaced (``None``: removed)."""
    with safe_open(str(path), framework="pt") as f:
        metadata = dict(f.metadata())
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)
    for key, value in changes.items():
        if value is None:
            metadata.pop(key)
        else:
            metadata[key] = value
    out = path.with_name("changed.safetensors")
    save_file(tensors, str(out), metadata=metadata)
    return out


METADATA_FAULTS = {
    "no hyper-parameters": ({"hyper_parameters": None}, "has no 'hyper_parameters' in its metadata"),
    "no run config": ({"run_config": None}, "has no 'run_config' in its metadata"),
    "hyper-parameters not JSON": ({"hyper_parameters": "{"}, "'hyper_parameters' is not valid JSON"),
    "hyper-parameters a list": (
        {"hyper_parameters": "[1, 2]"},
        "'hyper_parameters' is a list, not an object",
    ),
    "hyper-parameters null": ({"hyper_parameters": "null"}, "'hyper_parameters' is null"),
    "a model config that is a string": (
        {"hyper_parameters": '{"model": "quadratic", "model_config": "big"}'},
        "'hyper_parameters' needs a model name ('model', a string) and its options",
    ),
    "run config not JSON": ({"run_config": "]"}, "'run_config' is not valid JSON"),
    "history an object": ({"locality_history": "{}"}, "'locality_history' is an object"),
    "step a string": ({"global_step": '"three"'}, "'global_step' is a string"),
}


@pytest.mark.parametrize("fault", METADATA_FAULTS)
def test_malformed_metadata_is_refused_naming_the_field(
    weights: Path, fault: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each metadata field is decoded and type-checked; the error names the file and the field."""
    changes, message = METADATA_FAULTS[fault]
    changed = rewrite_metadata(weights, **changes)
    with pytest.raises(CheckpointError, match=r"changed\.safetensors") as err:
        read_weights(changed)
    assert message in str(err.value)
    line = one_line_error(*call(evaluate, [str(changed), "--synthetic"], capsys)[::2])
    assert message in line


HISTORY_FAULTS = {
    "snapshots that are numbers": ([1, 2], "locality snapshot 0 is not an object with an integer 'step'"),
    "a step that is a string": ([{**SNAPSHOT, "step": "0"}], "with an integer 'step'"),
    "no layers": ([{"step": 0}], "locality snapshot 0 has no 'layers' list"),
    "a layer more": (
        [SNAPSHOT, {"step": 1, "layers": [LAYER, LAYER]}],
        "snapshot 1 lists 2 layers, snapshot 0 1",
    ),
    "a head's mass a string": (
        [{"step": 0, "layers": [{"mean_distance": [1.0], "peak_mass": ["x"]}]}],
        "layer 1: 'peak_mass' is not a list of numbers",
    ),
    "per-head lists of two lengths": (
        [{"step": 0, "layers": [{"mean_distance": [1.0, 2.0], "peak_mass": [0.5]}]}],
        "'peak_mass' has 1 entries, 'mean_distance' 2",
    ),
    "centres that are not pairs": (
        [{"step": 0, "layers": [{**SNAPSHOT["layers"][0], "centres": [[0.0]] * 4}]}],
        "'centres' is not 4 pairs of numbers",
    ),
    "a coverage that is null": (
        [{"step": 0, "layers": [{**LAYER, "coverage": None}]}],
        "'coverage' is not a number",
    ),
    "an overlap alone": (
        [{"step": 0, "layers": [{k: v for k, v in LAYER.items() if k != "coverage"}]}],
        "holds one of 'overlap' and 'coverage' without the other",
    ),
    "a covariance that is not 2x2": (
        [{"step": 0, "layers": [{**SNAPSHOT["layers"][0], "inverse_covariance": [[[1.0]]] * 4}]}],
        "'inverse_covariance' is not 4 2x2 matrices",
    ),
}


@pytest.mark.parametrize("fault", HISTORY_FAULTS)
def test_a_malformed_history_is_refused_before_a_figure_is_written(
    weights: Path, fault: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The history's layout is checked where it is read, before the figures' folder is made."""
    history, message = HISTORY_FAULTS[fault]
    changed = rewrite_metadata(weights, locality_history=json.dumps(history))
    with pytest.raises(CheckpointError, match=r"changed\.safetensors") as err:
        load_trained(changed)
    assert message in str(err.value)
    out = tmp_path / "figs"
    line = one_line_error(*call(figures, [str(changed), "--out", str(out)], capsys)[::2])
    assert message in line and not out.exists()


def test_load_pretrained_says_what_it_takes(weights: Path, tmp_path: Path) -> None:
    """A name or a weights file; anything else is refused saying what it takes."""
    with pytest.raises(TypeError, match="name or a weights file's path, not a list"):
        sa_conv.load_pretrained([NAME])  # type: ignore[arg-type]
    ckpt = tmp_path / "run.ckpt"
    torch.save({"state_dict": {}}, ckpt)
    with pytest.raises(CheckpointError, match=r"is not a weights file \(\*.safetensors\)"):
        sa_conv.load_pretrained(ckpt)
    with pytest.raises(CheckpointError, match=r"weights file .* does not exist"):
        sa_conv.load_pretrained(tmp_path / "absent.safetensors")
    with pytest.raises(CheckpointError, match="neither a file nor a shipped model"):
        sa_conv.load_pretrained("tiny/absent-seed0")


def test_a_plain_pickle_is_refused_in_one_message_and_no_warning(tmp_path: Path) -> None:
    """torch's warning about the pickle protocol is not printed beside the one error."""
    path = tmp_path / "plain.ckpt"
    path.write_bytes(pickle.dumps({"state_dict": {}}, protocol=4))
    with warnings.catch_warnings(record=True) as caught, pytest.raises(CheckpointError) as err:
        warnings.simplefilter("always")
        load_checkpoint_file(path)
    assert "is not a readable checkpoint (UnpicklingError: " in str(err.value) and "\n" not in str(err.value)
    assert not caught, [str(w.message) for w in caught]


def test_an_output_path_that_is_a_link_is_written_through_and_a_pipe_is_refused(tmp_path: Path) -> None:
    """A link keeps pointing at its target, now rewritten; a pipe, a link loop or a link into no folder is
    refused and left as it was."""
    target, link = tmp_path / "target.html", tmp_path / "link.html"
    target.write_text("old page")
    link.symlink_to(target)
    atomic_write(link, lambda tmp: tmp.write_text("page"))
    assert link.is_symlink() and link.resolve() == target and target.read_text() == "page"
    loop, nowhere = tmp_path / "loop", tmp_path / "nowhere"
    loop.symlink_to(loop)
    nowhere.symlink_to(tmp_path / "missing" / "page.html")
    for bad in (loop, nowhere):
        with pytest.raises(OSError, match="A link that leads to no writable file"):
            atomic_write(bad, lambda tmp: tmp.write_text("page"))
        assert bad.is_symlink()
    assert not (tmp_path / "missing").exists()
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    with pytest.raises(OSError, match="Not a regular file"):
        atomic_write(pipe, lambda tmp: tmp.write_text("page"))
    assert pipe.is_fifo() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
