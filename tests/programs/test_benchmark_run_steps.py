"""The benchmark's back-to-back steps (``run_steps``): every path of each model measured in every round, the
speed-up taken from the best round of each path, and the report printing them."""

from __future__ import annotations

import pytest
import torch

from experiments.benchmark import run_steps
from experiments.benchmark.report import print_report


def test_every_path_of_every_model_in_every_round(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    speeds = iter([0.5, 0.25, 0.4, 0.2, 0.125, 0.05])  # seconds per step, in the order measured

    def fake_back_to_back(step, device, steps):  # the timing itself is the clock's, not tested
        calls.append(f"steps={steps}")
        return next(speeds)

    monkeypatch.setattr(run_steps, "back_to_back", fake_back_to_back)
    result = run_steps.bench_run_steps("tiny", 4, torch.device("cpu"), ["quadratic", "resnet18"], repeats=1)
    assert calls == ["steps=1"] * 6  # 2 rounds x (quadratic auto, reference; resnet18 auto)
    quadratic, resnet = result["rows"]
    # round 1: quadratic auto 0.5 s, reference 0.25 s, resnet 0.4 s; round 2: 0.2, 0.125, 0.05
    assert quadratic["images_per_s"] == {"auto": [8.0, 20.0], "reference": [16.0, 32.0]}
    assert quadratic["auto_over_reference"] == pytest.approx(20.0 / 32.0)  # the best of each
    assert resnet["images_per_s"] == {"auto": [10.0, 80.0]} and resnet["auto_over_reference"] is None
    assert result["threads"] == torch.get_num_threads() and result["rounds"] == run_steps.ROUNDS


def test_back_to_back_times_the_steps_asked_for() -> None:
    count = []
    seconds = run_steps.back_to_back(lambda: count.append(1), torch.device("cpu"), 3)
    assert len(count) == 2 + 3 and seconds >= 0  # two warm-up calls, then the timed ones


def test_the_report_names_what_it_measured(capsys: pytest.CaptureFixture[str]) -> None:
    section = {
        "scale": "small",
        "batch": 100,
        "threads": 2,
        "rounds": 2,
        "steps": 10,
        "rows": [
            {
                "model": "composite",
                "images_per_s": {"auto": [60.4, 60.2], "reference": [60.1, 57.7]},
                "auto_over_reference": 60.4 / 60.1,
            },
            {"model": "resnet18", "images_per_s": {"auto": [300.0, 310.0]}, "auto_over_reference": None},
        ],
    }
    print_report({"hardware": {"cpu": "Test CPU"}, "device": "cpu", "sizes": {}, "run_steps": section})
    out = capsys.readouterr().out
    assert "10 steps back to back on 2 threads, freed memory kept; 2 rounds" in out
    assert "composite" in out and "60.4    60.2" in out and "1.00x" in out
    assert "resnet18" in out and "310.0" in out


@pytest.mark.parametrize(
    ("model", "paths"),
    [
        ("composite", ("auto", "reference", "tiled")),  # auto keeps the reference: what tiled would gain
        ("learned-content", ("auto", "reference")),  # auto is the tiled kernel already
        ("quadratic", ("auto", "reference")),
        ("resnet18", ("auto",)),  # no attention with a choice of computation
    ],
)
def test_the_paths_each_model_is_timed_on(model: str, paths: tuple[str, ...]) -> None:
    assert run_steps._paths(model, "small", torch.device("cpu")) == paths
