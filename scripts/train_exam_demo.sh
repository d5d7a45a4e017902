#!/usr/bin/env bash
# An exam-reading continuation of the bundled demo model, so that it reads several views as one: examinations (2-4 views of one scene with an
# exam-level finding, report and per-view grounding, umind_core/data/exams.py) mixed 1:1 with single images of the
# demo model's own training recipe (so the single-image skills are rehearsed), every weight, from the bundled model.
#   scripts/train_exam_demo.sh WORK [MAX_STEPS]
# Data once (exams: varied look, seeds 9,000,000+; single images: demo model 3's recipe, seeds 100,000+); training
# resumes from the newest checkpoint in WORK/model. Held-out exams for `umind eval`: seeds 9,500,000+ (default look).
set -euo pipefail
work=${1:?usage: train_exam_demo.sh WORK [MAX_STEPS]}
steps=${2:-500}
here=$(cd "$(dirname "$0")/.." && pwd)
umind="$here/.venv/bin/umind"
mkdir -p "$work"
if [ ! -f "$work/exams/manifest.jsonl" ]; then
  "$umind" synth --out "$work/exams" -n 1200 --seed0 9000000 --size 256 --appearance varied --exams \
    --refusal-rate 0.5
fi
if [ ! -f "$work/single/manifest.jsonl" ]; then
  "$umind" synth --out "$work/single" -n 1200 --seed0 100000 --size 256 --appearance varied --augment 0.3 \
    --refusal-rate 0.5 --sites breast,breast,thyroid,thyroid,kidney,fetal_head
fi
if [ ! -f "$work/mixed.jsonl" ]; then
  "$here/.venv/bin/python" - "$work" <<'EOF'
import sys
from pathlib import Path

from umind_core.data.manifest import read_manifest, rebase, write_manifest

work = Path(sys.argv[1])
records = read_manifest(work / "exams" / "manifest.jsonl") + read_manifest(work / "single" / "manifest.jsonl")
for rec in records:
    rebase(rec, work)
write_manifest(records, work / "mixed.jsonl")
EOF
fi
if [ ! -f "$work/test_exams/manifest.jsonl" ]; then
  "$umind" synth --out "$work/test_exams" -n 100 --seed0 9500000 --size 256 --exams
fi
exec "$umind" train --manifest "$work/mixed.jsonl" --out "$work/model" --model "${FROM:-$here/umind_core/demo_model}" \
  --full --batch-size 4 --val-fraction 0.02 --lr 1e-4 --warmup-ratio 0.03 --epochs 3 --max-steps "$steps" \
  --save-every 100 --eval-every 250 --keep-checkpoints 2 --log-every 20 --no-progress
