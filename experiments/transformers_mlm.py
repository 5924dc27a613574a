"""Pre-train BERT masked-LM with transformers' own pipeline, under a process CPU-time budget.

The "same budget against transformers" cell of ``experiments/paper-mini.toml`` runs this script in a
subprocess (transformers is a test/bench dependency of bertkit, never imported by the package). It is the
standard Hugging Face recipe (``run_mlm.py``'s shape): ``BertTokenizerFast`` on the corpus text,
concatenate-and-chunk into ``max_seq_length`` blocks, ``DataCollatorForLanguageModeling`` (15% masking,
80/10/10), ``BertForMaskedLM`` and ``Trainer`` with AdamW, linear warm-up + decay, weight decay and
gradient clipping set to bertkit's values.

Fairness: same documents (the prepared data's train split: the held-out documents are left out), same
vocabulary, model shape, batch, learning rate, warm-up fraction, weight decay, clip norm, thread count and
the same process CPU seconds *for training* (tokenisation excluded on both sides). The number of steps is
planned from the CPU cost of a few calibration steps so the schedule ends when the budget does; a callback
stops training if the budget runs out first. On an idle machine CPU seconds at one thread equal wall-clock
seconds; on a shared machine they are what is comparable.

Writes ``OUT/model`` (HF layout + tokenizer) and ``OUT/result.json`` (tokens, steps, CPU, curve).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path


def documents(data_dir: Path, valid_documents: int | None) -> list[str]:
    """The train split's documents as text, one string each: the corpus files the manifest names, read in
    the same order as ``bertkit prepare`` read them, without the last ``valid_documents`` (bertkit's
    held-out split), so transformers tokenizes the raw text itself."""
    from bertkit.data.corpus import read_documents

    manifest = json.loads((data_dir / "manifest.json").read_text())
    docs = read_documents(manifest["corpus"])
    n = len(docs)
    if n != manifest["documents"]:
        sys.exit(f"corpus has {n} documents but the prepared data {manifest['documents']}: re-run prepare")
    k = valid_documents if valid_documents is not None else max(1, round(0.01 * n))
    return [" ".join(sentences) for sentences in docs[: n - k]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="bertkit prepare directory (vocab.txt, manifest.json)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--preset", default="mini")
    ap.add_argument("--model-overrides", default="{}")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-seq-length", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=float, default=0.06)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument(
        "--mlm-probability",
        type=float,
        default=0.15,
        help="share of tokens masked (bertkit's masked_lm_prob)",
    )
    ap.add_argument("--cpu-budget", type=float, required=True, help="process CPU seconds for training")
    ap.add_argument("--max-steps", type=int, default=100000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--valid-documents", type=int, default=None)
    ap.add_argument("--calibration-steps", type=int, default=6)
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import transformers
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        BertTokenizerFast,
        DataCollatorForLanguageModeling,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    from bertkit.config import BertConfig as OurConfig

    transformers.logging.set_verbosity_error()
    logging.getLogger("transformers").setLevel(logging.ERROR)
    data, out = Path(args.data), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((data / "manifest.json").read_text())
    tok = BertTokenizerFast.from_pretrained(str(data), do_lower_case=manifest.get("lowercase", True))
    block = args.max_seq_length - 2
    ids: list[int] = []
    for d in documents(data, args.valid_documents):
        ids.extend(tok(d, add_special_tokens=False)["input_ids"])
    examples = [
        {"input_ids": [tok.cls_token_id, *ids[i : i + block], tok.sep_token_id]}
        for i in range(0, len(ids) - block + 1, block)
    ]
    ours = OurConfig.preset(args.preset, vocab_size=len(tok.get_vocab()), **json.loads(args.model_overrides))
    cfg = BertConfig(**{k: v for k, v in ours.to_dict().items() if k not in ("architectures", "id2label")})
    collator = DataCollatorForLanguageModeling(tok, mlm=True, mlm_probability=args.mlm_probability)

    def training_args(steps: int, where: Path) -> TrainingArguments:
        return TrainingArguments(
            output_dir=str(where), max_steps=steps, per_device_train_batch_size=args.batch_size,
            learning_rate=args.lr, warmup_steps=int(round(args.warmup * steps)) if args.warmup < 1 else int(args.warmup),
            weight_decay=args.weight_decay, adam_epsilon=1e-6, max_grad_norm=1.0, lr_scheduler_type="linear",
            logging_steps=max(1, steps // 60), save_strategy="no", report_to=[], use_cpu=True, seed=args.seed,
            dataloader_num_workers=0, disable_tqdm=True,
        )  # fmt: skip

    # calibration: CPU seconds per step of this model on this machine (a throwaway copy)
    torch.manual_seed(args.seed)
    probe = Trainer(model=BertForMaskedLM(cfg), args=training_args(args.calibration_steps + 2, out / "calib"),
                    train_dataset=examples, data_collator=collator)  # fmt: skip
    marks: list[float] = []

    class Mark(TrainerCallback):
        def on_step_end(self, a, state, control, **kw):
            marks.append(time.process_time())

    probe.add_callback(Mark())
    probe.train()
    per_step = (marks[-1] - marks[1]) / max(1, len(marks) - 2)
    del probe
    steps = max(1, min(args.max_steps, int(args.cpu_budget / per_step)))

    class Budget(TrainerCallback):
        def __init__(self) -> None:
            self.t0 = time.process_time()
            self.steps = 0

        def on_step_end(self, a, state, control, **kw):
            self.steps = state.global_step
            if time.process_time() - self.t0 >= args.cpu_budget:
                control.should_training_stop = True

    torch.manual_seed(args.seed)
    model = BertForMaskedLM(cfg)
    trainer = Trainer(model=model, args=training_args(steps, out / "hf"), train_dataset=examples,
                      data_collator=collator)  # fmt: skip
    budget = Budget()
    trainer.add_callback(budget)
    w0 = time.time()
    budget.t0 = time.process_time()
    trainer.train()
    cpu = time.process_time() - budget.t0
    wall = time.time() - w0
    model.save_pretrained(out / "model")
    tok.save_pretrained(out / "model")
    tokens_per_step = args.batch_size * args.max_seq_length
    curve = [
        {"step": r["step"], "loss": r["loss"], "tokens": r["step"] * tokens_per_step}
        for r in trainer.state.log_history
        if "loss" in r
    ]
    result = {
        "runner": f"transformers {transformers.__version__} (BertForMaskedLM + DataCollatorForLanguageModeling + Trainer)",
        "planned_steps": steps, "steps": budget.steps, "tokens": budget.steps * tokens_per_step,
        "calibration_cpu_s_per_step": round(per_step, 4), "cpu_budget_s": args.cpu_budget,
        "train_cpu_s": round(cpu, 1), "train_wall_s": round(wall, 1), "examples": len(examples),
        "hyperparameters": {"lr": args.lr, "warmup": args.warmup, "batch_size": args.batch_size,
                            "max_seq_length": args.max_seq_length, "weight_decay": args.weight_decay,
                            "mlm_probability": args.mlm_probability},
        "curve": curve,
    }  # fmt: skip
    (out / "result.json").write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "curve"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
