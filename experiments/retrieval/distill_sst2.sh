#!/usr/bin/env bash
# Distillation on SST-2 (issue 15's must-show: the 3-layer student keeps >= 97% of the teacher's dev accuracy
# at >= 1.8x its batch-32 throughput). The teacher is all-MiniLM-L6-v2 fine-tuned by bertkit with the settings
# of experiments/minilm.toml's SST-2 cell (full train set, 1 epoch, batch 32, lr 5e-5, seed 42: the matrix
# runner deletes its fine-tuned weights, so this runs `bertkit finetune glue` itself); the student is teacher
# layers 0, 2 and 4 (DistilBERT's every-other-layer initialisation) trained with the documented defaults of
# `bertkit distill` (temperature 2, alpha 0.5, lr 5e-5, batch 32, 128 tokens), EPOCHS epochs over the full
# train set (or, with MAX_TRAIN=N, over a seeded sample of N sentences: for a short CPU budget). STUDENT=mini
# (any `bertkit distill --student` value) distils into that student instead, from a seeded random start, with
# LR (default 5e-5) as its learning rate; it goes to OUT/student-mini and results/retrieval/distill-sst2-mini.json
# so the layer student's result stays. The `result`
# stage times teacher and student again on their own (best of 3 interleaved rounds, with the machine's load
# recorded beside them) and writes experiments/results/retrieval/distill-sst2.json;
# `python experiments/retrieval/report.py` turns it into docs/results/retrieval-results.md's "Distillation (SST-2)".
#   usage: experiments/retrieval/distill_sst2.sh OUT_DIR
#   STAGES="result" experiments/retrieval/distill_sst2.sh OUT_DIR     re-runs only those stages
#   (stages: teacher distill result; distill needs teacher, result needs distill). A killed teacher run
#   continues from its newest checkpoint when the script is run again.
set -euo pipefail
. "$(dirname "$0")/distill_common.sh"
OUT=${1:?usage: distill_sst2.sh OUT_DIR}
EPOCHS=${EPOCHS:-1}
MAX_TRAIN=${MAX_TRAIN:-}
SST2=${SST2:-../shared/data/glue/SST-2}
RESULT=${RESULT:-experiments/results/retrieval/distill-sst2$TAG.json}
mkdir -p "$OUT"
if want teacher; then
  $PY -m bertkit finetune glue --task SST-2 --data-dir "$SST2" --model "$MINILM" --out "$OUT/teacher" \
      --epochs 1 --batch-size 32 --lr 5e-5 --seed 42 --threads 2 --checkpoint-every 200 $(resume "$OUT/teacher")
fi
if want distill; then
  $PY -m bertkit distill --teacher "$OUT/teacher/model" --student "$STUDENT" --task glue --task-name SST-2 \
      --data-dir "$SST2" --out "$OUT/student$TAG" --temperature 2 --alpha 0.5 --epochs "$EPOCHS" --batch-size 32 \
      --lr "$LR" --max-seq-length 128 --seed 0 ${MAX_TRAIN:+--max-train-examples "$MAX_TRAIN"}
fi
if want result; then
  $PY "$(dirname "$0")/distill_result.py" --run "$OUT" --student-dir "student$TAG" --data-dir "$SST2" \
      --out "$RESULT" --command "${TAG:+STUDENT=$STUDENT LR=$LR }EPOCHS=$EPOCHS${MAX_TRAIN:+ MAX_TRAIN=$MAX_TRAIN} experiments/retrieval/distill_sst2.sh OUT"
fi
