#!/usr/bin/env bash
# The paper-scale quadratic model with the paper's recipe (6 layers, 9 heads, hidden 400, batch 100, SGD +
# warm-up/cosine, attention dropout 0.1 with one mask per step, the paper's protocol: all 50,000 training
# images, the test split every epoch) on one GPU, for as many epochs as fit a 15-minute lease: a 40-epoch
# schedule stopped after 10 minutes. bf16-mixed (the products only; logits and softmax stay float32);
# PRECISION=32-true for the paper's float32. CIFAR-10 from $DATA_DIR (ImageFolder or torchvision root).
#   DATA_DIR=/path/to/cifar10 bash experiments/gpu_paper_quadratic.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-benchmarks}"
mkdir -p "$OUT"
python -c "import sa_conv" 2>/dev/null || pip install -q -e .
python -m experiments.run quadratic --scale paper --epochs 40 --max-time 00:00:10:00 --protocol paper \
  --precision "${PRECISION:-bf16-mixed}" --accelerator gpu --progress lines \
  --data-dir "${DATA_DIR:?set DATA_DIR to CIFAR-10}" --output-dir "$OUT/gpu-paper" \
  2>&1 | grep -E "^(sa-conv|parameters|speed|epoch|done|error)" | tee "$OUT/gpu-paper-quadratic.txt"
python - "$OUT" <<'PY' | tee -a "$OUT/gpu-paper-quadratic.txt"
import json, pathlib, sys
m = json.loads(sorted(pathlib.Path(sys.argv[1], "gpu-paper/quadratic").glob("version_*/metrics.json"))[-1].read_text())
for h in m["history"]:
    print(f"epoch {h['epoch']}: test acc {h['test_acc']:.4f} ({h['epoch_seconds']:.1f} s)")
print(f"protocol {m['protocol']}: best test acc {m['best_test_acc']:.4f}, final {m['final_test_acc']:.4f} "
      f"after {m['epochs_completed']} epochs of a 40-epoch schedule on {m['hardware'].get('gpu')}")
for layer, summary in enumerate(m.get("layers", []), 1):
    print(f"layer {layer}: median alpha {summary.get('median_alpha', float('nan')):.2f}, "
          f"{summary['sharp_heads']}/{summary['heads']} sharp heads, mean distance {summary['mean_distance']:.2f} px")
PY
