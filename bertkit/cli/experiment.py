"""``bertkit experiment CONFIG.toml``: run a matrix of pre-training / fine-tuning cells (see bertkit.experiment);
``bertkit experiment report CONFIG.toml``: write its Markdown report from the result files."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "experiment",
        help="run a resumable matrix of pre-training and fine-tuning runs (experiments/*.toml)",
        description=(
            "Run every cell of CONFIG.toml that has no result file yet (vocab -> prepare -> pre-training -> "
            "fine-tuning); one JSON result per finished cell goes to the results folder (default "
            "results/<name>/ beside the config). `bertkit experiment report CONFIG.toml` writes the report."
        ),
    )
    p.add_argument("config", help="matrix TOML (e.g. experiments/paper-mini.toml), or `report`")
    p.add_argument("report_config", nargs="?", help=argparse.SUPPRESS)
    p.add_argument("--out", help="run outputs (models, logs); default runs/<name>")
    p.add_argument("--results", help="result files folder (default: results/<name>/ beside the config)")
    p.add_argument("--only", help="cells to run: globs or substrings, comma-separated (their inputs run too)")
    p.add_argument("--dry-run", action="store_true", help="list the cells that would run, run nothing")
    p.add_argument("--doc", help="report: the Markdown file to write (default: the config's `report` path)")
    p.add_argument("--quiet", action="store_true", help="no progress bars (the per-cell line stays)")
    p.add_argument("--rerun-changed", action="store_true",
                   help="run again finished cells whose settings changed in the config (old results kept aside)")  # fmt: skip
    p.add_argument(
        "--rerun",
        metavar="PATTERN",
        help="run again the finished cells matching PATTERN (as --only; old results kept aside)",
    )
    p.add_argument(
        "--threads",
        type=int,
        help="torch threads for this sitting (default: the config's `threads`; each result records it)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> dict:
    from bertkit.errors import UserError

    if args.config == "report":
        if not args.report_config:
            raise UserError("usage: bertkit experiment report CONFIG.toml [--results DIR] [--doc FILE]")
        from bertkit.report import write_report

        return write_report(args.report_config, results=args.results, doc=args.doc)
    if args.report_config:
        raise UserError(f"unexpected argument {args.report_config!r} (did you mean `experiment report`?)")
    from bertkit.experiment import run_matrix

    return run_matrix(args.config, out=args.out, only=args.only, results=args.results, dry_run=args.dry_run,
                      progress=not args.quiet, rerun_changed=args.rerun_changed,
                      threads=args.threads, rerun=args.rerun)  # fmt: skip
