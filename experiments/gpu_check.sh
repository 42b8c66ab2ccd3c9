#!/usr/bin/env bash
# One GPU check sized for a 15-minute lease (< 8 minutes on one H200): the benchmark on CUDA, then
# 2 epochs of the paper-scale quadratic model in bf16-mixed, printing epoch time, images/s, TFLOP/s.
#   bash experiments/gpu_check.sh [OUT_DIR]      (CIFAR-10 from $DATA_DIR if set, else synthetic)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-benchmarks}"
mkdir -p "$OUT"
python -c "import sa_conv" 2>/dev/null || pip install -q -e .
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu-hardware.txt"
python -m experiments.benchmark --device cuda --json "$OUT/gpu-benchmark.json" | tee "$OUT/gpu-benchmark.txt"
if [[ -n "${DATA_DIR:-}" ]]; then data=(--data-dir "$DATA_DIR"); else data=(--synthetic --synthetic-size 50000); fi
python -m experiments.run quadratic --scale paper --epochs 2 --precision bf16-mixed --accelerator gpu \
  --no-figures --output-dir "$OUT/gpu-runs" "${data[@]}" 2>&1 | tr '\r' '\n' | grep -E "^(sa-conv|config|parameters|done)" \
  | tee "$OUT/gpu-train.txt"
python - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
m = json.loads(sorted((out / "gpu-runs/quadratic").glob("version_*/metrics.json"))[-1].read_text())
for h in m["history"]:
    print(f"epoch {h['epoch']}: {h['epoch_seconds']:.1f} s, val acc {h['val_acc']:.4f}")
print(f"{m['train_images_per_s']:.0f} train images/s, {m['train_tflops']:.1f} TFLOP/s achieved, on {m['hardware'].get('gpu')}")
PY
