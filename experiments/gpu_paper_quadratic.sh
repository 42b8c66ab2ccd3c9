#!/usr/bin/env bash
# The paper's quadratic run (6 layers, 9 heads, hidden 400; attention dropout 0.1, batch 100, SGD with
# warm-up + cosine over 300 epochs; the paper's protocol: all 50,000 training images, the test split every
# epoch) on one GPU, in chunks of at most CHUNK_SECONDS (default 540: 9 minutes), each resuming the last
# (a chunk ends with SIGTERM: the run saves interrupted.ckpt and the next chunk continues it exactly).
# Stops after CHUNKS chunks (default: until the 300 epochs are done). bf16-mixed; PRECISION=32-true for the
# paper's float32. CIFAR-10 from DATA_DIR (ImageFolder or torchvision root), else data/cifar10-jpeg.tar.gz
# of the checkout, extracted. Runs on a bare machine: python3, PYTHONPATH, no pip.
#   [DATA_DIR=DIR] [CHUNKS=N] bash experiments/gpu_paper_quadratic.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
out="${1:-${OUT:-runs/gpu-paper}}"
mkdir -p "$out"
if [[ -z "${DATA_DIR:-}" && -f data/cifar10-jpeg.tar.gz ]]; then
  mkdir -p data/extracted && tar -xzf data/cifar10-jpeg.tar.gz -C data/extracted
  DATA_DIR=data/extracted/cifar10-jpeg
fi
: "${DATA_DIR:?set DATA_DIR to CIFAR-10 (or put cifar10-jpeg.tar.gz in data/)}"
chunk=0
while [[ -z "${CHUNKS:-}" || $chunk -lt $CHUNKS ]]; do
  chunk=$((chunk + 1))
  echo "== chunk $chunk"
  timeout --signal=TERM --kill-after=60 "${CHUNK_SECONDS:-540}" python3 -m experiments.run quadratic \
    --scale paper --protocol paper --precision "${PRECISION:-bf16-mixed}" --accelerator gpu --progress lines \
    --data-dir "$DATA_DIR" --output-dir "$out/runs" --resume auto 2>&1 | tee -a "$out/gpu-paper-quadratic.log"
  code=${PIPESTATUS[0]}
  [[ $code == 0 ]] && { echo "== the 300 epochs are done"; break; }
  [[ $code == 143 || $code == 124 ]] || { echo "== chunk $chunk failed (exit $code)"; exit "$code"; }
done
