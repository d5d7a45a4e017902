#!/usr/bin/env bash
# Demo model 4, one stage per call: the data once, then training that resumes from the newest checkpoint in the
# stage's folder. Continues demo model 3's weights (same 256 px input, same LLM and decoder).
#   scripts/train_demo_model4.sh WORK STAGE [MAX_STEPS]
# Data: HC18 and BUSI from ../shared/data (UMIND_REAL_DATA overrides), imported as released and split by subject
# once (seed 0, 20% of subjects held out; the held-out split is never mixed in: `umind mix` refuses it), beside
# synthetic rehearsal of the four sites (varied look, augmented, seeds 200000.., never used by an evaluation).
# Stage 1 starts from the bundled demo model 3; stage N from WORK/stage<N-1>/final (or FROM=<folder>); LR overrides
# the stage's learning rate; AUGMENT=F shows a fraction F of the images zoomed, shifted and toned (`umind train
# --augment`); MAX_IMAGE_SIZE=N lets the real scans, larger than the input, keep up to about N x N pixels (`umind
# train --max-image-size`; the synthetic 256 px images keep theirs); MIN_IMAGE_SIZE=N reads smaller images (BUSI's and
# the synthetic 256 px ones) enlarged to about N x N (`umind train --min-image-size`).
set -euo pipefail
work=${1:?usage: train_demo_model4.sh WORK STAGE [MAX_STEPS]}
stage=${2:?usage: train_demo_model4.sh WORK STAGE [MAX_STEPS]}
steps=${3:-1500}
here=$(cd "$(dirname "$0")/.." && pwd)
umind="$here/.venv/bin/umind"
data=${UMIND_REAL_DATA:-$here/../shared/data}
mkdir -p "$work"
if [ ! -f "$work/hc18/manifest.jsonl" ]; then
  "$umind" import hc18 "$data/hc18" --out "$work/hc18" --split test=0.2 --split-seed 0
fi
if [ ! -f "$work/busi/manifest.jsonl" ]; then
  "$umind" import busi "$data/busi" --out "$work/busi" --split test=0.2 --split-seed 0
fi
if [ ! -f "$work/synth/manifest.jsonl" ]; then
  "$umind" synth --out "$work/synth" -n 1500 --seed0 200000 --size 256 --appearance varied --augment 0.3 \
    --refusal-rate 0.5 --sites breast,thyroid,kidney,fetal_head
fi
# MORE_SYNTH=N adds N further synthetic images (seeds 201500..; WORK/synth_more<N>) for more rehearsal;
# HC18_COPIES / BUSI_COPIES repeat a real part (its copies stay in one group); the defaults make WORK/train
more=${MORE_SYNTH:-0}; extra=()
mix=train; [ "${HC18_COPIES:-1}${BUSI_COPIES:-1}${more}" = 110 ] || mix="train_h${HC18_COPIES:-1}_b${BUSI_COPIES:-1}_s${more}"
if [ "$more" -gt 0 ]; then
  if [ ! -f "$work/synth_more$more/manifest.jsonl" ]; then
    "$umind" synth --out "$work/synth_more$more" -n "$more" --seed0 201500 --size 256 --appearance varied \
      --augment 0.3 --refusal-rate 0.5 --sites breast,thyroid,kidney,fetal_head
  fi
  extra=(more="$work/synth_more$more/manifest.jsonl")
fi
# BUSI_BALANCE=1 splits BUSI's training split by finding (WORK/busi/train_<finding>.jsonl) and repeats each finding
# to about as many images as the commonest one (times BUSI_COPIES): the held-out normals were read as lesions
[ "${BUSI_BALANCE:-0}" = 1 ] && mix="${mix}_balanced"
if [ ! -f "$work/$mix/manifest.jsonl" ]; then
  busi=(busi="$work/busi/train.jsonl*${BUSI_COPIES:-1}")
  if [ "${BUSI_BALANCE:-0}" = 1 ]; then  # the parts are written once, with the mix; a resumed stage reuses both
    mapfile -t busi < <("$here/.venv/bin/python" "$here/scripts/split_by_finding.py" "$work/busi/train.jsonl" \
      --copies "${BUSI_COPIES:-1}")
  fi
  "$umind" mix --out "$work/$mix/manifest.jsonl" hc18="$work/hc18/train.jsonl*${HC18_COPIES:-1}" \
    "${busi[@]}" synth="$work/synth/manifest.jsonl" "${extra[@]}"
fi
case "$stage" in
  1) from=${FROM:-$here/umind_core/demo_model}; lr=${LR:-3e-4} ;;
  *) from=${FROM:-$work/stage$((stage - 1))/final}; lr=${LR:-2e-4} ;;
esac
exec "$umind" train --manifest "$work/$mix/manifest.jsonl" --out "$work/stage$stage" --model "$from" --full \
  --batch-size 8 --val-fraction 0.02 --lr "$lr" --warmup-ratio 0.03 --epochs 20 --max-steps "$steps" \
  --save-every 100 --eval-every 300 --keep-checkpoints 2 --log-every 20 --no-progress --augment "${AUGMENT:-0}" \
  ${MAX_IMAGE_SIZE:+--max-image-size "$MAX_IMAGE_SIZE"} ${MIN_IMAGE_SIZE:+--min-image-size "$MIN_IMAGE_SIZE"}
