"""A metrics.json as a run writes it, for tests of what reads one back."""

from __future__ import annotations

# metrics.json's keys in the order the run wrote them before RunSummary existed (sa_conv.training.run)
FACTS = [
    "run_dir",
    "model",
    "scale",
    "protocol",
    "config",
    "params",
    "train_flops_per_image",
    "eval_flops_per_image",
    "n_train_images",
    "n_val_images",
    "n_test_images",
    "epochs_completed",
    "global_steps",
    "wall_time_s",
    "train_step_seconds",
    "train_images_per_s",
    "train_tflops",
    "mfu",
    "peak_tflops",
    "precision",
    "bf16_products",
    "peak_memory_gb",
    "devices",
    "data",
    "hardware",
    "sa_conv_version",
]
RECORDS = ["history", "best_checkpoint", "commit"]

# one layer's locality summary, as a run's metrics.json holds it
LAYER = {"mean_distance": 2.5, "sharp_heads": 1, "heads": 9, "conv_likeness": 0.2}


def metrics(protocol: str) -> dict[str, object]:
    """A metrics.json as the run wrote it: its facts, the protocol's accuracies, its records."""
    facts: dict[str, object] = {key: i for i, key in enumerate(FACTS)}
    facts |= {"run_dir": "runs/quadratic/version_0", "model": "quadratic", "protocol": protocol}
    facts |= {"config": {"epochs": 2}, "mfu": None, "bf16_products": None, "data": {"fingerprint": {}}}
    if protocol == "paper":
        accuracy = {"best_test_acc": 0.7, "final_test_acc": 0.6, "test_acc": 0.7}
    else:
        accuracy = {"test_acc": 0.65, "best_val_acc": 0.66}
    records = {
        "history": [{"epoch": 1, "step": 450, "val_acc": 0.5}],
        "best_checkpoint": None,
        "commit": "abc",
    }
    return {**facts, **accuracy, "test_correct": "0110", **records, "layers": [LAYER]}
