import dataclasses
import urllib.error

import pytest
import torch
from helpers import write_tree
from torchvision.io import encode_jpeg
from torchvision.transforms.v2 import functional as TF

from sa_conv.data.augmentation import AugmentationRNG, random_crop_flip
from sa_conv.data.batches import TensorImages
from sa_conv.data.config import DataConfig
from sa_conv.data.datamodule import CIFAR10DataModule
from sa_conv.data.fingerprint import data_difference, fingerprint
from sa_conv.data.sources import CIFAR10_CLASSES, DataError, load_image_folder, load_torchvision
from sa_conv.data.split import held_out, split_indices, split_warning


def data_module(**kwargs) -> CIFAR10DataModule:
    """The data module with ``kwargs``: DataConfig's fields go into its config, the rest are its own."""
    fields = {f.name for f in dataclasses.fields(DataConfig)}
    config = DataConfig(**{k: kwargs.pop(k) for k in list(kwargs) if k in fields})
    return CIFAR10DataModule(config, **kwargs)


def test_random_crop_flip_equals_per_image_torchvision():
    images = torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8)
    got = random_crop_flip(images, generator=torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)  # replay the same draws
    oy, ox = torch.randint(0, 9, (16,), generator=g), torch.randint(0, 9, (16,), generator=g)
    flip = torch.rand(16, generator=g) < 0.5
    for i in range(16):
        ref = TF.crop(TF.pad(images[i], [4]), int(oy[i]), int(ox[i]), 32, 32)
        if flip[i]:
            ref = TF.horizontal_flip(ref)
        torch.testing.assert_close(got[i], ref, rtol=0, atol=0)
    assert flip.any() and not flip.all() and len(set(oy.tolist())) > 1


def test_synthetic_module_splits_and_normalizes():
    dm = data_module(source="synthetic", synthetic_size=200, batch_size=32, val_size=40, seed=1)
    dm.setup()
    assert (len(dm.train_set), len(dm.val_set)) == (160, 40)
    assert dm.train_set.images.dtype == torch.uint8
    dm2 = data_module(source="synthetic", synthetic_size=200, batch_size=32, val_size=40, seed=1)
    dm2.setup()
    torch.testing.assert_close(dm.val_set.labels, dm2.val_set.labels)  # fixed-seed split
    images, labels = next(iter(dm.train_dataloader()))
    assert images.shape == (32, 3, 32, 32) and labels.shape == (32,)
    out, _ = dm.on_after_batch_transfer((images, labels), 0)  # no trainer: no augmentation
    mean, std = torch.tensor([0.4914, 0.4822, 0.4465]), torch.tensor([0.2023, 0.1994, 0.2010])  # train.py's
    expected = (images.float() / 255 - mean[:, None, None]) / std[:, None, None]
    torch.testing.assert_close(out, expected)


def test_image_folder_decodes_once_to_uint8(tmp_path):
    images, labels = load_image_folder(write_tree(tmp_path), "train")
    assert images.shape == (20, 3, 32, 32) and images.dtype == torch.uint8
    assert labels.tolist() == [c for c in range(10) for _ in range(2)]
    assert abs(int(images[6, 0, 5, 5]) - 60) <= 2  # class 3, image 0: value 60 (JPEG rounding)
    dm = data_module(data_dir=tmp_path, batch_size=4, val_size=2)
    assert dm.resolved_source() == "folder"


def test_a_validation_split_cut_to_a_fifth_says_so(tmp_path, capsys):
    dm = data_module(data_dir=write_tree(tmp_path), batch_size=4, val_size=10)
    dm.setup()
    assert len(dm.val_set) == 4 and len(dm.train_set) == 16  # a fifth of the 20 training images
    assert "val_size 10 is over a fifth of the 20 training images: 4 are held out" in capsys.readouterr().err
    data_module(data_dir=tmp_path, batch_size=4, val_size=4).setup()
    assert "warning" not in capsys.readouterr().err


def test_image_folder_missing_classes(tmp_path):
    write_tree(tmp_path, classes=CIFAR10_CLASSES[:8])
    with pytest.raises(DataError, match="missing: ship, truck"):
        load_image_folder(tmp_path, "train")


def test_image_folder_corrupt_and_wrong_size(tmp_path):
    write_tree(tmp_path)
    bad = tmp_path / "train" / "cat" / "0001.jpg"
    bad.write_bytes(b"not a jpeg at all")
    with pytest.raises(DataError, match=r"cannot decode image .*cat/0001.jpg"):
        load_image_folder(tmp_path, "train")
    big = tmp_path / "test" / "dog" / "0000.jpg"
    big.write_bytes(encode_jpeg(torch.zeros(3, 40, 36, dtype=torch.uint8)).numpy().tobytes())
    with pytest.raises(DataError, match=r"dog/0000.jpg is 36x40, expected 32x32"):
        load_image_folder(tmp_path, "test")


def test_image_folder_without_split(tmp_path):
    with pytest.raises(DataError, match="no 'train' folder"):
        load_image_folder(tmp_path, "train")


def test_offline_download_message(tmp_path, monkeypatch):
    from torchvision.datasets import CIFAR10

    def no_network(self):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(CIFAR10, "download", no_network)
    with pytest.raises(DataError, match=r"could not download CIFAR-10 .*--data-dir"):
        load_torchvision(tmp_path, "train", download=True)


def test_corrupt_torchvision_copy(tmp_path):
    (tmp_path / "cifar-10-batches-py").mkdir()
    with pytest.raises(DataError, match="missing or corrupt"):
        load_torchvision(tmp_path, "train", download=False)


def test_real_cifar_folder(cifar_dir):
    dm = data_module(data_dir=cifar_dir, batch_size=100, val_size=1000, train_subset=2000)
    dm.setup()
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_set)) == (2000, 1000, 2000)
    counts = torch.bincount(dm.test_set.labels, minlength=10)
    assert counts.tolist() == [200] * 10
    # real photographs: not constant, roughly CIFAR's channel means
    means = dm.test_set.images.float().mean(dim=(0, 2, 3)) / 255
    torch.testing.assert_close(means, torch.tensor([0.4914, 0.4822, 0.4465]), atol=0.03, rtol=0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"val_size": -10}, "val_size must be from 0 to"),
        ({"train_subset": 0}, "train_subset must be an integer from 1 to"),
        ({"batch_size": 0}, "batch_size must be an integer from 1 to"),
        ({"eval_batch_size": -1}, "eval_batch_size must be positive"),
        ({"protocol": "kaggle"}, "protocol must be clean or paper"),
        ({"source": "ftp"}, "unknown data source"),
    ],
)
def test_bad_data_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        data_module(**{"source": "synthetic", **kwargs})


def test_the_papers_protocol_trains_on_everything_and_validates_on_the_test_split():
    clean = data_module(source="synthetic", synthetic_size=200, val_size=40, batch_size=50)
    paper = data_module(source="synthetic", synthetic_size=200, val_size=40, batch_size=50, protocol="paper")
    for dm in (clean, paper):
        dm.setup()
    assert (len(clean.train_set), len(clean.val_set)) == (160, 40)
    assert len(paper.train_set) == 200 and len(paper.val_set) == 0
    val_images = torch.cat([images for images, _ in paper.val_dataloader()])
    torch.testing.assert_close(val_images, paper.test_set.images)  # the validation loop is the test split


def test_the_order_is_drawn_when_the_first_batch_is_taken():
    """Lightning may create the training iterator before it sets the epoch (a resume from an epoch end):
    the batches must follow the epoch set before the first batch is drawn."""
    dm = data_module(source="synthetic", synthetic_size=100, val_size=20, batch_size=16)
    dm.setup()
    loader = dm.train_dataloader()
    early = iter(loader)  # created during epoch 0 ...
    loader.batch_sampler.set_epoch(1)  # ... then the epoch is set
    first = next(early)[1]
    fresh = data_module(source="synthetic", synthetic_size=100, val_size=20, batch_size=16)
    fresh.setup()
    expected = fresh.train_dataloader()
    expected.batch_sampler.set_epoch(1)
    torch.testing.assert_close(first, next(iter(expected))[1])
    epoch0 = next(iter(fresh.train_dataloader()))[1]
    assert not torch.equal(first, epoch0)


def test_creating_a_loader_iterator_leaves_the_global_rng_alone():
    dm = data_module(source="synthetic", synthetic_size=100, val_size=20, batch_size=16)
    dm.setup()
    state = torch.get_rng_state()
    iter(dm.train_dataloader())
    iter(dm.val_dataloader())
    assert torch.equal(torch.get_rng_state(), state)


def test_the_split_holds_out_validation_images_by_the_seed():
    config = DataConfig(val_size=30, train_subset=50)
    train, val = split_indices(200, config, seed=1)
    assert (len(train), len(val)) == (50, 30)
    assert not set(train.tolist()) & set(val.tolist())
    again, _ = split_indices(200, config, seed=1)
    other, _ = split_indices(200, config, seed=2)
    assert torch.equal(train, again) and not torch.equal(train, other)
    assert len(split_indices(200, DataConfig(protocol="paper"), seed=1)[1]) == 0  # the paper: no hold-out
    assert held_out(100, DataConfig(val_size=5000)) == 20  # at most a fifth
    assert split_warning(100, DataConfig(val_size=5000)) == (
        "warning: val_size 5000 is over a fifth of the 100 training images: 20 are held out for validation"
    )
    assert split_warning(100, DataConfig(val_size=20)) is None


def test_the_augmentation_generator_resumes_its_draws():
    rng = AugmentationRNG(7)
    device, start = rng.state()
    assert device == "cpu" and torch.equal(start, torch.Generator().manual_seed(7).get_state())
    first = torch.rand(3, generator=rng.generator(torch.device("cpu")))
    saved = rng.state()
    expected = torch.rand(3, generator=rng.generator(torch.device("cpu")))
    resumed = AugmentationRNG(7)
    resumed.load(*saved)
    assert torch.equal(resumed.state()[1], saved[1])  # before its first batch: the saved state
    assert torch.equal(torch.rand(3, generator=resumed.generator(torch.device("cpu"))), expected)
    assert not torch.equal(first, expected)
    other_kind = AugmentationRNG(7)
    other_kind.load("cuda", saved[1])  # saved on another kind of device: seeded again here
    assert torch.equal(torch.rand(3, generator=other_kind.generator(torch.device("cpu"))), first)
    dm = data_module(source="synthetic", synthetic_size=40)
    dm.load_state_dict({"augment_rng": saved[1]})  # a checkpoint from before the device was recorded
    assert dm.state_dict()["augment_device"] == "cpu" and torch.equal(
        dm.state_dict()["augment_rng"], saved[1]
    )


def test_the_fingerprint_tells_other_data_from_the_same_data_moved():
    images = torch.randint(0, 256, (6, 3, 32, 32), dtype=torch.uint8)
    labels = torch.arange(6)
    splits = {"train": TensorImages(images[:4], labels[:4]), "val": TensorImages(images[4:], labels[4:])}
    splits["test"] = TensorImages(images[:2], labels[:2])
    same = fingerprint({k: TensorImages(v.images.clone(), v.labels.clone()) for k, v in splits.items()})
    assert fingerprint(splits) == same and {k: same[k] for k in ("train", "val", "test")} == {
        "train": 4,
        "val": 2,
        "test": 2,
    }
    assert data_difference(fingerprint(splits), same) is None
    relabelled = {**splits, "val": TensorImages(images[4:], labels[4:].flip(0))}
    assert data_difference(fingerprint(splits), fingerprint(relabelled)).startswith(
        "the same numbers of images, other images or labels (sha256 "
    )
    smaller = {**splits, "train": TensorImages(images[:3], labels[:3])}
    assert data_difference(fingerprint(splits), fingerprint(smaller)) == "train 4 images (now: 3)"
