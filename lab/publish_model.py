"""``python -m lab.publish_model``: put a model bertkit pre-trained under ``models/`` so a new user can fine-tune
or serve it right after cloning.

The weights are stored in bf16 (half the bytes of fp32; bertkit and transformers load them back into fp32
models, so only the last bits of each weight are lost) beside the config and tokenizer files, and a
``README.md`` model card says how the model was made (the exact command, corpus, compute) and what it scores,
from the result files named on the command line (never typed in)::

    python -m lab.publish_model MODEL_DIR models/NAME --title "..." --command "..." --corpus "..." \\
        --compute "..." --scores LABEL=metrics.json ... [--hparam KEY=VALUE ...] [--note "..."]

Each ``--scores`` file is a ``metrics.json`` that ``bertkit finetune`` wrote; its dev metrics go in the card
under LABEL. Each ``--seeds LABEL=GLOB`` names the result files of one study cell's seeds (``python -m lab
experiment`` writes them, one per seed, e.g. ``experiments/results/S/finetune__M__STS-B__seed*.json``): the card
shows their primary score's mean and sample standard deviation.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

# The repository keeps models small: the issue that asked for a committed model allows at most this much.
MAX_WEIGHTS_BYTES = 25 * 1024 * 1024
WEIGHTS = "model.safetensors"
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def bf16_weights(model_dir: Path, out_file: Path) -> int:
    """Write ``model_dir``'s weights to ``out_file`` with every floating tensor in bf16; returns its bytes."""
    import torch
    from safetensors.torch import load_file

    from bertkit.checkpoint import save_state_dict

    state = load_file(str(model_dir / WEIGHTS))
    save_state_dict(
        {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in state.items()}, out_file
    )
    return out_file.stat().st_size


def score_rows(scores: list[str]) -> dict[str, str]:
    """``LABEL=metrics.json`` arguments -> ``{LABEL: "pearson 0.670, spearman 0.682 (dev, 5749 training
    examples)"}``; a missing file or one without ``metrics`` is a one-line error naming it."""
    from bertkit.errors import UserError

    rows: dict[str, str] = {}
    for arg in scores:
        label, sep, path = arg.partition("=")
        if not sep or not label or not path:
            raise UserError(f"--scores {arg!r}: expected LABEL=PATH/metrics.json")
        try:
            result = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise UserError(f"--scores {label}: cannot read {path} ({e})") from None
        metrics = result.get("metrics") if isinstance(result, dict) else None
        if not isinstance(metrics, dict) or not metrics:
            raise UserError(f"--scores {label}: {path} has no 'metrics' (a bertkit finetune metrics.json)")
        text = ", ".join(f"{k} {v:.3f}" for k, v in metrics.items() if isinstance(v, (int, float)))
        rows[label] = (
            f"{text} ({result.get('split', 'dev')}, {result.get('train_examples', '?')} training examples)"
        )
    return rows


def seed_rows(seeds: list[str]) -> dict[str, str]:
    """``LABEL=GLOB`` arguments -> ``{LABEL: "71.3 ± 0.8 (Spearman; dev, 3 seeds at lr 3e-4, 5749 training
    examples)"}`` from the study result files GLOB matches (their ``primary`` scores, already in %). Fewer than
    two files, a file without ``primary``, or seeds fine-tuned differently are one-line errors naming them."""
    import glob
    import statistics

    from bertkit.errors import UserError

    rows: dict[str, str] = {}
    for arg in seeds:
        label, sep, pattern = arg.partition("=")
        if not sep or not label or not pattern:
            raise UserError(f"--seeds {arg!r}: expected LABEL=GLOB (study result files, one per seed)")
        paths = sorted(glob.glob(pattern))
        if len(paths) < 2:
            raise UserError(
                f"--seeds {label}: {pattern} matches {len(paths)} file(s); a spread needs 2 or more"
            )
        results = []
        for path in paths:
            try:
                result = json.loads(Path(path).read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                raise UserError(f"--seeds {label}: cannot read {path} ({e})") from None
            if not isinstance(result, dict) or not isinstance(result.get("primary"), (int, float)):
                raise UserError(
                    f"--seeds {label}: {path} has no 'primary' score (a lab experiment result file)"
                )
            results.append(result)
        settings = {json.dumps(r.get("hyperparameters"), sort_keys=True) for r in results}
        if len(settings) > 1 or len({r.get("task") for r in results}) > 1:
            raise UserError(
                f"--seeds {label}: {pattern} mixes tasks or fine-tuning settings (one cell's seeds expected)"
            )
        scores = [float(r["primary"]) for r in results]
        # the metric the primary score is: the one key equal to it in every seed's file
        keys = [
            k
            for k in results[0].get("metrics", {})
            if all(r["metrics"].get(k) == r["primary"] for r in results)
        ]
        metric = keys[0] if len(keys) == 1 else "score"
        lr = (results[0].get("hyperparameters") or {}).get("lr")
        rows[label] = (
            f"{statistics.mean(scores):.1f} ± {statistics.stdev(scores):.1f} ({metric}; dev, {len(scores)} seeds"
            + (f" at lr {lr:g}" if isinstance(lr, (int, float)) else "")
            + f", {results[0].get('train_examples', '?')} training examples)"
        )
    return rows


def publish(
    model_dir: Path,
    out: Path,
    *,
    title: str,
    command: str,
    corpus: str,
    compute: str,
    scores: list[str],
    notes: list[str],
    hyperparameters: dict[str, str] | None = None,
    seeds: list[str] | None = None,
) -> Path:
    """Write ``out`` (config, bf16 weights, tokenizer files, README.md) from ``model_dir``, atomically."""
    from bertkit.errors import UserError
    from bertkit.io import atomic_dir
    from bertkit.model_card import write_model_card

    if not (model_dir / WEIGHTS).is_file() or not (model_dir / "config.json").is_file():
        raise UserError(f"{model_dir}: not a model directory (config.json and {WEIGHTS} expected)")
    rows = {**seed_rows(seeds or []), **score_rows(scores)}
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    with atomic_dir(out) as tmp:
        size = bf16_weights(model_dir, tmp / WEIGHTS)
        if size > MAX_WEIGHTS_BYTES:
            raise UserError(
                f"{model_dir}: {size / 2**20:.1f} MB in bf16, over the {MAX_WEIGHTS_BYTES >> 20} MB limit"
            )
        shutil.copyfile(model_dir / "config.json", tmp / "config.json")
        for name in TOKENIZER_FILES:
            # tokenizer.json holds the vocabulary too: vocab.txt is copied only where it is the sole record of it
            # (a model on a published vocabulary then carries no byte copy of that file)
            if name == "vocab.txt" and (model_dir / "tokenizer.json").is_file():
                continue
            if (model_dir / name).is_file():
                shutil.copyfile(model_dir / name, tmp / name)
        shape = {
            k: config[k] for k in ("num_hidden_layers", "hidden_size", "num_attention_heads") if k in config
        }
        write_model_card(
            tmp,
            title=title,
            kind="pretraining",
            task="a general-purpose English encoder to fine-tune (pre-trained by bertkit)",
            data={"corpus": corpus, "compute": compute, **shape, "weights": f"bf16, {size / 2**20:.1f} MB"},
            hyperparameters=hyperparameters or {"recipe": "see the command"},
            metrics=rows,
            command=command,
            notes=notes,
        )
    return out


def main(argv: list[str] | None = None) -> int:
    from bertkit.errors import UserError

    ap = argparse.ArgumentParser(prog="python -m lab.publish_model", description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--title", required=True)
    ap.add_argument("--command", required=True, help="the exact command that pre-trained the model")
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--compute", required=True, help="e.g. '3.0 CPU-hours on an Intel Xeon (1 thread)'")
    ap.add_argument("--scores", action="append", default=[], metavar="LABEL=metrics.json")
    ap.add_argument("--seeds", action="append", default=[], metavar="LABEL=GLOB",
                    help="one study cell's seed result files: the card shows mean ± std")  # fmt: skip
    ap.add_argument("--note", action="append", default=[])
    ap.add_argument("--hparam", action="append", default=[], metavar="KEY=VALUE", help="a recipe setting")
    args = ap.parse_args(argv)
    try:
        hparams = dict(h.split("=", 1) for h in args.hparam if "=" in h)
        if len(hparams) != len(args.hparam):
            raise UserError(f"--hparam: expected KEY=VALUE, got {[h for h in args.hparam if '=' not in h]}")
        publish(args.model_dir, args.out, title=args.title, command=args.command, corpus=args.corpus,
                compute=args.compute, scores=args.scores, notes=args.note, hyperparameters=hparams,
                seeds=args.seeds)  # fmt: skip
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
