#!/usr/bin/env bash
# The paper-scale quadratic model (6 layers, 9 heads, hidden 400, batch 100, SGD + warm-up/cosine) on
# one GPU for as many epochs as fit a 15-minute lease: a 40-epoch schedule stopped after 10 minutes,
# recording validation accuracy per epoch. CIFAR-10 from $DATA_DIR (ImageFolder or torchvision root).
#   DATA_DIR=/path/to/cifar10 bash experiments/gpu_paper_quadratic.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-benchmarks}"
mkdir -p "$OUT"
python -c "import sa_conv" 2>/dev/null || pip install -q -e .
python -m experiments.run quadratic --scale paper --epochs 40 --max-time 00:00:10:00 --precision bf16-mixed \
  --accelerator gpu --data-dir "${DATA_DIR:?set DATA_DIR to CIFAR-10}" --output-dir "$OUT/gpu-paper" \
  2>&1 | tr '\r' '\n' | grep -E "^(sa-conv|config|parameters|done)" | tee "$OUT/gpu-paper-quadratic.txt"
python - "$OUT" <<'PY' | tee -a "$OUT/gpu-paper-quadratic.txt"
import json, pathlib, sys
m = json.loads(sorted(pathlib.Path(sys.argv[1], "gpu-paper/quadratic").glob("version_*/metrics.json"))[-1].read_text())
for h in m["history"]:
    print(f"epoch {h['epoch']}: val acc {h['val_acc']:.4f} ({h['epoch_seconds']:.1f} s)")
print(f"test acc {m['test_acc']:.4f} after {m['epochs_completed']} epochs on {m['hardware'].get('gpu')}")
PY
