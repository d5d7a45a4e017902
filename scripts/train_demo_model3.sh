#!/usr/bin/env bash
# Demo model 3, one stage per call: data (once) and training that resumes from the newest checkpoint in the
# stage's folder. Continues demo model 2's weights (same 256 px input, same LLM and decoder).
#   scripts/train_demo_model3.sh WORK STAGE [MAX_STEPS]
# Stage 1 starts from the bundled demo model 2; stage N from WORK/stage<N-1>/final (or from the committed
# stage weights given as FROM=<folder>). Data: the varied look with photometric augmentation
# (umind_core/data/augment.py, p=0.3 per transform), breast and thyroid twice as often (lesion-heavy),
# seeds 100000.. (no evaluation set uses them); scanner_b is never generated here.
set -euo pipefail
work=${1:?usage: train_demo_model3.sh WORK STAGE [MAX_STEPS]}
stage=${2:?usage: train_demo_model3.sh WORK STAGE [MAX_STEPS]}
steps=${3:-2000}
here=$(cd "$(dirname "$0")/.." && pwd)
umind="$here/.venv/bin/umind"
mkdir -p "$work"
if [ ! -f "$work/train/manifest.jsonl" ]; then
  "$umind" synth --out "$work/train" -n 8000 --seed0 100000 --size 256 --appearance varied --augment 0.3 \
    --refusal-rate 0.5 --sites breast,breast,thyroid,thyroid,kidney,fetal_head
fi
case "$stage" in
  1) from=${FROM:-$here/umind_core/demo_model}; lr=3e-4 ;;
  *) from=${FROM:-$work/stage$((stage - 1))/final}; lr=2e-4 ;;
esac
exec "$umind" train --manifest "$work/train/manifest.jsonl" --out "$work/stage$stage" --model "$from" --full \
  --batch-size 8 --val-fraction 0.02 --lr "$lr" --warmup-ratio 0.03 --epochs 3 --max-steps "$steps" \
  --save-every 200 --eval-every 400 --keep-checkpoints 2 --log-every 20 --no-progress
