#!/usr/bin/env bash
# Everything a session lent a GPU checks, in one command (its device time is short): the CUDA tests, then the
# GPU pre-training bench at the paper's two phases (256 x 128; 128 x 512, half the paper's batch so that
# transformers' dense MLM logits fit beside both models) and compiled at 256 x 128.
# Usage, in the repository root on the GPU machine: benchmarks/gpu_checks.sh OUT_DIR [TAG]
# Writes OUT_DIR/test-cuda.txt and OUT_DIR/bench-gpu-TAG-*.jsonl (TAG: e.g. h100; default "gpu").
set -uo pipefail
out=${1:?usage: benchmarks/gpu_checks.sh OUT_DIR [TAG]}
tag=${2:-gpu}
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/nvidia-smi.txt"
"$py" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
"$py" -m pytest -q -s -p no:cacheprovider tests/test_cuda.py 2>&1 | tee "$out/test-cuda.txt"
"$py" -m benchmarks.bench_gpu --batch-size 256 --seq 128 | tee "$out/bench-gpu-$tag-b256.jsonl"
"$py" -m benchmarks.bench_gpu --batch-size 128 --seq 512 --repeats 6 | tee "$out/bench-gpu-$tag-s512.jsonl"
timeout 240 "$py" -m benchmarks.bench_gpu --batch-size 256 --seq 128 --compile \
    | tee "$out/bench-gpu-$tag-b256-compiled.jsonl"
