"""The `result` stage of experiments/retrieval/distill_sst2.sh and distill_conll.sh: time the distilled student
against its teacher once more on their own (bertkit.distill.remeasure_speed: best of 3 interleaved rounds, with the CPU
load just before), and write one result file with the run's OUT/student/metrics.json, the teacher's
fine-tuning metrics, the command, commit, CPU (lscpu model name) and torch version.

    python experiments/retrieval/distill_result.py --run OUT --data-dir ../shared/data/glue/SST-2 \
        --out experiments/results/retrieval/distill-sst2.json --command "..."
    python experiments/retrieval/distill_result.py --run OUT --ner-train T --ner-dev V --out ... --command "..."
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

QUIET_BUSY = 0.1  # below this fraction of the CPU busy just before timing, the timings count as quiet


def lscpu_model() -> str:
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        text = ""
    for line in text.splitlines():
        if line.lower().startswith("model name"):
            return line.split(":", 1)[1].strip()
    from bertkit.tuning import cpu_info

    return cpu_info()["model"]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--run", type=Path, required=True, help="distill_sst2.sh's OUT (teacher/, student/)")
    p.add_argument("--student-dir", default="student", help="the student's folder under --run")
    p.add_argument("--data-dir", type=Path, help="the GLUE SST-2 folder (SST-2 runs)")
    p.add_argument("--ner-train", type=Path, help="CoNLL-2003 train.txt (NER runs, with --ner-dev)")
    p.add_argument("--ner-dev", type=Path, help="CoNLL-2003 valid.txt: the dev set the speed is timed on")
    p.add_argument("--out", type=Path, required=True, help="the result file to write")
    p.add_argument("--command", required=True, help="the command that produced the run (recorded)")
    p.add_argument("--no-remeasure", action="store_true", help="keep only the timings taken after training")
    a = p.parse_args()
    ner = a.ner_dev is not None
    if ner == (a.data_dir is not None) or ner != (a.ner_train is not None):
        p.error("give --data-dir (SST-2) or --ner-train and --ner-dev (CoNLL-2003)")

    import torch

    from bertkit.distill import remeasure_speed
    from bertkit.io import atomic_write_json
    from bertkit.tasks.glue import glue_task_data
    from bertkit.tasks.ner import ner_task_data
    from lab.experiment import machine_info

    distill = json.loads((a.run / a.student_dir / "metrics.json").read_text(encoding="utf-8"))
    teacher_run = json.loads((a.run / "teacher" / "metrics.json").read_text(encoding="utf-8"))
    info = machine_info()
    result = {
        "command": a.command,
        "commit": info["commit"],
        "dirty": info["dirty"],
        "cpu": lscpu_model(),
        "cores": info["cores"],
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "task_label": "CoNLL-2003" if ner else "SST-2",
        "metric": "f1" if ner else "accuracy",  # the dev metric of teacher_finetune and of the two models
        "teacher_finetune": teacher_run,  # bertkit finetune's OUT/metrics.json (dev metrics, settings, steps)
        "distill": distill,
        "quiet_below_cpu_busy": QUIET_BUSY,
    }
    if not a.no_remeasure:
        task = ner_task_data(a.ner_train, a.ner_dev) if ner else glue_task_data("SST-2", a.data_dir)
        seq = int(distill["settings"]["max_seq_length"])
        result["speed"] = remeasure_speed(
            a.run / "teacher" / "model", a.run / a.student_dir / "model", task, seq
        )
        result["speed_source"] = "re-measured after training (result stage)"
    else:
        result["speed"] = {
            **distill["speed_load"],
            "teacher": {k: distill["teacher"][k] for k in ("latency_ms_batch1", "throughput_batch32")},
            "student": {k: distill["student"][k] for k in ("latency_ms_batch1", "throughput_batch32")},
            "speedup_batch32": distill["speedup_batch32"],
            "speedup_batch1": distill["speedup_batch1"],
        }
        result["speed_source"] = "measured by bertkit distill right after training"
    result["quiet"] = bool(result["speed"]["cpu_busy_before"] < QUIET_BUSY)
    atomic_write_json(a.out, result)
    print(a.out)


if __name__ == "__main__":
    main()
