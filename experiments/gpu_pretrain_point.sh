#!/usr/bin/env bash
# The pre-training budget study's GPU point: its ELECTRA-mini recipe pre-trained on one GPU for a fixed
# wall-clock budget, so the quality-per-CPU-hour curve can show what a GPU-hour buys.
#
# Usage, in the repository root on the GPU machine:
#   experiments/gpu_pretrain_point.sh DATA_DIR OUT_DIR [SECONDS]
# DATA_DIR: a `bertkit prepare` directory (the study's corpus-large shards, or a subset of them). The number of
# steps is set from a 150-step timing run so that the real run takes about SECONDS (default 200) of training.
# Writes OUT_DIR/run (metrics.jsonl, eval.jsonl, results.json, model/ in the BERT layout, model/electra/).
set -euo pipefail
data=${1:?usage: experiments/gpu_pretrain_point.sh DATA_DIR OUT_DIR [SECONDS]}
out=${2:?usage: experiments/gpu_pretrain_point.sh DATA_DIR OUT_DIR [SECONDS]}
budget=${3:-200}
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
mkdir -p "$out"
# The study's recipe (experiments/pretrain-study.toml: mini, 15% masked, lr 5e-4, 6% warm-up) at ELECTRA-Small's
# batch of 128 sequences, which fills a GPU better than the CPU cells' 32, in bf16 autocast.
common=(--data "$data" --objective electra --preset mini --batch-size 128 --max-seq-length 128 --lr 5e-4
        --warmup 0.06 --precision bf16 --device cuda --log-every 50 --quiet --valid-documents 50)
"$py" -m bertkit pretrain "${common[@]}" --out "$out/timing" --steps 150 --checkpoint-every 0 --eval-batches 0 \
    > "$out/timing.json"
steps=$("$py" - "$out/timing/metrics.jsonl" "$budget" <<'PY'
import json, sys
rows = [json.loads(x) for x in open(sys.argv[1]) if x.strip()]
per_step = 128 * 128 / rows[-1]["tokens_per_s"]  # the last window: warmed up
print(max(150, int(float(sys.argv[2]) / per_step)))
PY
)
echo "steps: $steps"
"$py" -m bertkit pretrain "${common[@]}" --out "$out/run" --steps "$steps" --checkpoint-every 0 --eval-batches 40 \
    > "$out/run.json"
# PACK_DIR: copy the logs and the encoder (bf16, in two safetensors files under 16 MB each) there.
if [ -n "${PACK_DIR:-}" ]; then
    "$py" - "$out/run" "$PACK_DIR" <<'PY'
import shutil, sys
from pathlib import Path

from safetensors.torch import load_file, save_file

run, dst = Path(sys.argv[1]), Path(sys.argv[2])
state = {k: v.bfloat16().contiguous() for k, v in load_file(run / "model" / "model.safetensors").items()}
parts, size = [{}, {}], 0
total = sum(v.numel() * 2 for v in state.values())
for k in sorted(state):
    parts[0 if size < total / 2 else 1][k] = state[k]
    size += state[k].numel() * 2
for i, part in enumerate(parts):
    save_file(part, dst / f"model-bf16-{i + 1}.safetensors", metadata={"format": "pt"})
for name in ("metrics.jsonl", "eval.jsonl", "results.json"):
    shutil.copy(run / name, dst / name)
shutil.copy(run / "model" / "config.json", dst / "config.json")
PY
fi
