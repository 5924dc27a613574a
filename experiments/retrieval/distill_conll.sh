#!/usr/bin/env bash
# Distillation on CoNLL-2003 NER, the issue-15 companion of distill_sst2.sh: the teacher is all-MiniLM-L6-v2
# fine-tuned by `bertkit finetune ner` with experiments/minilm.toml's CoNLL-2003 settings (3 epochs, batch 16,
# lr 5e-5, seed 42); the student is teacher layers 0, 2 and 4 (STUDENT=mini: BERT-mini from a seeded random
# start, with LR as its learning rate), trained by `bertkit distill --task ner` (soft targets over the labelled
# word positions, temperature 2, alpha 0.5) for EPOCHS epochs (default 3, the teacher's). The `result` stage
# times both again on their own and writes experiments/results/retrieval/distill-conll[-STUDENT].json;
# `python experiments/retrieval/report.py` renders it in docs/results/retrieval-results.md.
#   usage: experiments/retrieval/distill_conll.sh OUT_DIR      (STAGES="result" ... re-runs only that stage)
#   A killed teacher run continues from its newest checkpoint when the script is run again.
set -euo pipefail
. "$(dirname "$0")/distill_common.sh"
OUT=${1:?usage: distill_conll.sh OUT_DIR}
EPOCHS=${EPOCHS:-3}
CONLL=${CONLL:-../shared/data/conll2003}
RESULT=${RESULT:-experiments/results/retrieval/distill-conll$TAG.json}
mkdir -p "$OUT"
if want teacher; then
  $PY -m bertkit finetune ner --train "$CONLL/train.txt" --dev "$CONLL/valid.txt" --model "$MINILM" \
      --out "$OUT/teacher" --epochs 3 --batch-size 16 --lr 5e-5 --seed 42 --threads 2 --checkpoint-every 300 $(resume "$OUT/teacher")
fi
if want distill; then
  $PY -m bertkit distill --teacher "$OUT/teacher/model" --student "$STUDENT" --task ner \
      --train "$CONLL/train.txt" --dev "$CONLL/valid.txt" --out "$OUT/student$TAG" --temperature 2 --alpha 0.5 \
      --epochs "$EPOCHS" --batch-size 16 --lr "$LR" --max-seq-length 128 --seed 0
fi
if want result; then
  $PY "$(dirname "$0")/distill_result.py" --run "$OUT" --student-dir "student$TAG" \
      --ner-train "$CONLL/train.txt" --ner-dev "$CONLL/valid.txt" --out "$RESULT" \
      --command "${TAG:+STUDENT=$STUDENT LR=$LR }EPOCHS=$EPOCHS experiments/retrieval/distill_conll.sh OUT"
fi
