"""`python -m experiments.models` lists every shipped model of the manifest, its numbers in their columns."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments import models
from sa_conv.models.weights import manifest

SHIPPED = Path(__file__).resolve().parents[2] / "weights"


def test_the_list_names_every_shipped_model_with_its_numbers_in_their_columns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SA_CONV_WEIGHTS", str(SHIPPED))
    assert models.main([]) == 0
    header, *rows, footer = capsys.readouterr().out.splitlines()
    shipped = manifest()
    assert shipped and [row.split()[0] for row in rows] == list(shipped)
    for row, entry in zip(rows, shipped.values(), strict=True):
        _, acc, _, _, precision, epochs = row.split()
        assert (acc, precision, int(epochs)) == (
            f"{100 * entry.test_acc:.1f}%",
            entry.precision,
            entry.epochs,
        )
        assert row.index(f" {precision} ") + 1 == header.index("precision")  # the columns line up
        assert row.rindex(f" {epochs}") + 1 == header.index("epochs")
    assert footer.startswith(f"({len(shipped)} models in {SHIPPED}")
