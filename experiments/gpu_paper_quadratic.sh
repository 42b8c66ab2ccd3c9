#!/usr/bin/env bash
# The paper's quadratic run (6 layers, 9 heads, hidden 400; attention dropout 0.1, batch 100, SGD with
# warm-up + cosine over 300 epochs; the paper's protocol: all 50,000 training images, the test split every
# epoch) on one GPU, in chunks of at most CHUNK_SECONDS (default 540: 9 minutes), each resuming the last
# (a chunk ends with SIGTERM: the run saves interrupted.ckpt and the next chunk continues it exactly).
# A chunk killed outright (SIGKILL: the OOM killer, timeout's --kill-after; no checkpoint at its end) is
# followed by the next, which resumes from the newest checkpoint (a 10-minute snapshot, a step or an epoch
# end) to the same weights as an unbroken run; after MAX_KILLED (default 3) such chunks in a row the script
# stops. Killed itself (a lost machine), run it again: every chunk is `--resume auto`.
# Stops after CHUNKS chunks (default: until every epoch is done). The default precision (--precision auto:
# the project's bf16 on a GPU with bf16, else float32 with TF32 products); PRECISION=32-true for float32. CIFAR-10 from DATA_DIR (ImageFolder or torchvision root), else data/cifar10-jpeg.tar.gz
# of the checkout, extracted. Runs on a bare machine: python3, PYTHONPATH, no pip.
# `--device cpu` is a dry run on the CPU at the tiny scale (float32; synthetic images unless DATA_DIR is
# set); EXTRA_ARGS adds flags of experiments.run to every chunk (e.g. "--epochs 2 --checkpoint-every 5").
#   [DATA_DIR=DIR] [CHUNKS=N] [EXTRA_ARGS=...] bash experiments/gpu_paper_quadratic.sh [--device cpu] [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
device=cuda
if [[ "${1:-}" == "--device" ]]; then device="$2"; shift 2; fi
out="${1:-${OUT:-runs/gpu-paper}}"
mkdir -p "$out"
if [[ "$device" == cuda ]]; then
  if [[ -z "${DATA_DIR:-}" && -f data/cifar10-jpeg.tar.gz ]]; then
    mkdir -p data/extracted && tar -xzf data/cifar10-jpeg.tar.gz -C data/extracted
    DATA_DIR=data/extracted/cifar10-jpeg
  fi
  : "${DATA_DIR:?set DATA_DIR to CIFAR-10 (or put cifar10-jpeg.tar.gz in data/)}"
  run=(--scale paper --precision "${PRECISION:-auto}" --accelerator gpu --data-dir "$DATA_DIR")
elif [[ "$device" == cpu ]]; then
  run=(--scale tiny --precision "${PRECISION:-32-true}" --accelerator cpu)
  if [[ -n "${DATA_DIR:-}" ]]; then run+=(--data-dir "$DATA_DIR"); else run+=(--synthetic); fi
else
  echo "--device must be cuda or cpu, got $device" >&2; exit 2
fi
read -r -a extra <<< "${EXTRA_ARGS:-}"
chunk=0
killed=0
while [[ -z "${CHUNKS:-}" || $chunk -lt $CHUNKS ]]; do
  chunk=$((chunk + 1))
  echo "== chunk $chunk"
  timeout --signal=TERM --kill-after=60 "${CHUNK_SECONDS:-540}" python3 -m experiments.run quadratic \
    "${run[@]}" --protocol paper --progress lines --output-dir "$out/runs" --resume auto \
    ${extra[@]+"${extra[@]}"} 2>&1 | tee -a "$out/gpu-paper-quadratic.log"
  code=${PIPESTATUS[0]}
  [[ $code == 0 ]] && { echo "== every epoch is done"; break; }
  if [[ $code == 137 ]]; then  # SIGKILL: the next chunk resumes from the newest checkpoint
    killed=$((killed + 1))
    echo "== chunk $chunk was killed (SIGKILL, $killed in a row)"
    [[ $killed -lt ${MAX_KILLED:-3} ]] || { echo "== stopping: $killed chunks in a row were killed"; exit "$code"; }
    continue
  fi
  killed=0
  [[ $code == 143 || $code == 124 ]] || { echo "== chunk $chunk failed (exit $code)"; exit "$code"; }
done
