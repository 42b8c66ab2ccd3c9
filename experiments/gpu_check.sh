#!/usr/bin/env bash
# One GPU check sized for a 15-minute lease (< 8 minutes on one H200): the benchmark on CUDA, then the
# paper-scale quadratic model with the paper's recipe (attention dropout 0.1 on the shared path, the
# paper's protocol, bf16-mixed), printing epoch time, images/s, achieved TFLOP/s and the fraction of the
# GPU's bf16 matmul peak (MFU).
#   bash experiments/gpu_check.sh [OUT_DIR]      (CIFAR-10 from $DATA_DIR if set, else synthetic)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-benchmarks}"
mkdir -p "$OUT"
python -c "import sa_conv" 2>/dev/null || pip install -q -e .
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu-hardware.txt"
python -m experiments.benchmark --device cuda --json "$OUT/gpu-benchmark.json" | tee "$OUT/gpu-benchmark.txt"
if [[ -n "${DATA_DIR:-}" ]]; then data=(--data-dir "$DATA_DIR"); else data=(--synthetic --synthetic-size 50000); fi
python -m experiments.run quadratic --scale paper --epochs 2 --protocol paper --precision bf16-mixed \
  --accelerator gpu --figures-every none --max-time 00:00:06:00 --progress lines \
  --output-dir "$OUT/gpu-runs" "${data[@]}" 2>&1 | grep -E "^(sa-conv|parameters|speed|epoch|done|error)" \
  | tee "$OUT/gpu-train.txt"
python - "$OUT" <<'PY' | tee -a "$OUT/gpu-train.txt"
import json, pathlib, sys
import torch
from lightning_fabric.utilities.throughput import get_available_flops
out = pathlib.Path(sys.argv[1])
m = json.loads(sorted((out / "gpu-runs/quadratic").glob("version_*/metrics.json"))[-1].read_text())
for h in m["history"]:
    print(f"epoch {h['epoch']}: {h['epoch_seconds']:.1f} s, test acc {h.get('test_acc', float('nan')):.4f}")
peak = get_available_flops(torch.device("cuda"), torch.bfloat16) or 989.4e12  # H200 SXM dense bf16
print(f"{m['train_images_per_s']:.0f} train images/s, {m['train_tflops']:.1f} TFLOP/s achieved, "
      f"MFU {m['train_tflops'] * 1e12 / peak:.1%} of {peak / 1e12:.0f} TFLOP/s bf16, on {m['hardware'].get('gpu')}")
PY
