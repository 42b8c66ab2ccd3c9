#!/usr/bin/env bash
# The GPU check, about 7 minutes on one H200, on a bare machine: python3
# with torch, torchvision, pytorch-lightning, torchmetrics, matplotlib, tensorboard and pyyaml; no pip,
# no network. It prints (and writes to OUT_DIR/gpu-check.log, the whole log, unfiltered):
#   1. the machine: GPU, driver, library versions;
#   2. the benchmark on CUDA: every fast path against the reference, and the paper-scale training step
#      of every model in bf16 at batch 100 with its achieved TFLOP/s;
#   3. the paper quadratic model with the paper's recipe (attention dropout 0.1 on the shared path, SGD,
#      warm-up + cosine over 300 epochs, all 50,000 images, the test split every epoch) for a bounded
#      time: steady-state images/s, the epoch time, MFU against the GPU's dense bf16 peak, peak memory.
# CIFAR-10 comes from data/cifar10-jpeg.tar.gz in the checkout (ignored by git: copy ../shared/data's
# archive there and carry it), else synthetic images. `--device cpu` is a dry run of every step but the
# CUDA ones, at smoke sizes, bounded by its work rather than by the clock (one timed call per benchmark
# measurement, 10 training steps, no timeouts): a few minutes on 2 idle cores, longer on a loaded machine,
# never cut short by one.
#   bash experiments/gpu_check.sh [--device cpu] [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
device=cuda
if [[ "${1:-}" == "--device" ]]; then device="$2"; shift 2; fi
out="${1:-${OUT:-benchmarks/gpu}}"
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if [[ "$device" == cuda ]]; then
  scale=paper; bench=(--scale paper --models-scale paper --step-batch 100)
  budget=(--max-time 00:00:04:00); stop="stopped after 00:00:04:00"
  bench_limit=(timeout 270); train_limit=(timeout 330); synthetic=50000
  accelerator=gpu
else  # a dry run: a fixed amount of work, however loaded the machine is
  scale=tiny; bench=(--scale tiny --models-scale tiny --step-batch 8 --repeats 1)
  budget=(--epochs 1 --limit-train-batches 10); stop="10 training steps"
  bench_limit=(); train_limit=(); synthetic=2000
  accelerator=cpu
fi
if [[ -f data/cifar10-jpeg.tar.gz ]]; then
  tar -xzf data/cifar10-jpeg.tar.gz -C "$work" && data=(--data-dir "$work/cifar10-jpeg")
else
  data=(--synthetic --synthetic-size "$synthetic")
fi

check() {
  local failed=0
  echo "== machine"
  if [[ "$device" == cuda ]]; then nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; fi
  python3 -c "import platform, torch, torchvision, pytorch_lightning as pl
print('python', platform.python_version(), '| torch', torch.__version__, '| torchvision', torchvision.__version__,
      '| lightning', pl.__version__, '| cuda', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)"
  echo "== data: ${data[*]}"
  echo "== benchmark (${bench[*]})"
  ${bench_limit[@]+"${bench_limit[@]}"} python3 -m experiments.benchmark --device "$device" "${bench[@]}" \
    --json "$out/benchmark.json" || { code=$?; failed=1; echo "(the benchmark failed or ran out of time: exit $code)"; }
  echo "== training: the paper quadratic model, the paper's recipe, $stop"
  ${train_limit[@]+"${train_limit[@]}"} python3 -m experiments.run quadratic --scale "$scale" --protocol paper \
    --accelerator "$accelerator" "${budget[@]}" --figures-every none --snapshot-minutes 0 --progress lines \
    --output-dir "$work/runs" "${data[@]}" || { code=$?; failed=1; echo "(the training run failed: exit $code)"; }
  echo "== summary"
  python3 - "$work/runs" "$out/train-metrics.json" <<'PY'
import json, pathlib, shutil, sys
found = sorted(pathlib.Path(sys.argv[1]).glob("quadratic/version_*/metrics.json"))
if not found:
    sys.exit("no metrics.json: the training run did not finish (see the log above)")
shutil.copy(found[-1], sys.argv[2])
m = json.loads(found[-1].read_text())
rate = m.get("train_images_per_s") or 0.0
epochs = [h for h in m.get("history", []) if h.get("epoch_seconds")]
print(f"steady-state training: {rate:.0f} images/s on {m['hardware'].get('gpu') or m['hardware']['cpu']}")
print(f"epoch of {m['n_train_images']:,} images: {m['n_train_images'] / rate if rate else float('nan'):.1f} s "
      f"projected from the rate; measured epochs (with evaluation): "
      + ", ".join(f"{h['epoch_seconds']:.1f} s" for h in epochs))
print(f"300 epochs projected: {300 * m['n_train_images'] / rate / 3600 if rate else float('nan'):.2f} h of training")
print(f"FLOPs per image (trained path, forward + backward): {m['train_flops_per_image'] / 1e9:.2f} GFLOP; "
      f"achieved {m['train_tflops']:.1f} TFLOP/s; MFU {m['mfu'] if m.get('mfu') is not None else float('nan'):.1%} "
      f"of {m.get('peak_tflops') or float('nan'):.0f} TFLOP/s ({m['precision']})")
print(f"peak memory: {m.get('peak_memory_gb') or float('nan'):.1f} GiB; test accuracy after "
      f"{m['epochs_completed']} epochs: {m.get('best_test_acc', float('nan')):.4f}")
PY
  [[ $? == 0 && $failed == 0 ]]
}

check 2>&1 | tee "$out/gpu-check.log"
exit "${PIPESTATUS[0]}"
