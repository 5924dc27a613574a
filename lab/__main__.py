"""``python -m lab experiment CONFIG.toml``: run a matrix of pre-training / fine-tuning cells (see
:mod:`lab.experiment`); ``python -m lab report CONFIG.toml``: write its Markdown report from the result files
(:mod:`lab.report`). Each prints a JSON summary; a user error is one line on stderr and exit status 2, a
matrix with a failed cell exit status 1."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence

from bertkit.cli.args import Parser
from bertkit.errors import UserError
from bertkit.model_card import set_command

PROG = "python -m lab"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description="the bertkit lab: experiment matrices and their reports")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more detail to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = sub.add_parser(
        "experiment",
        help="run a resumable matrix of pre-training and fine-tuning runs (experiments/*.toml)",
        description=(
            "Run every cell of CONFIG.toml that has no result file yet (vocab -> prepare -> pre-training -> "
            "fine-tuning); one JSON result per finished cell goes to the results folder (default "
            f"results/<name>/ beside the config). `{PROG} report CONFIG.toml` writes the report."
        ),
    )
    p.add_argument("config", help="matrix TOML (e.g. experiments/paper-mini.toml)")
    p.add_argument("--out", help="run outputs (models, logs); default runs/<name>")
    p.add_argument("--results", help="result files folder (default: results/<name>/ beside the config)")
    p.add_argument("--only", help="cells to run: globs or substrings, comma-separated (their inputs run too)")
    p.add_argument("--dry-run", action="store_true", help="list the cells that would run, run nothing")
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
    p.set_defaults(func=run_experiment)
    r = sub.add_parser(
        "report",
        help="write a matrix's Markdown report (and figures) from its result files",
        description="Write the report named by CONFIG.toml's `report` key from the result files only.",
    )
    r.add_argument("config", help="matrix TOML (e.g. experiments/paper-mini.toml)")
    r.add_argument("--results", help="result files folder (default: results/<name>/ beside the config)")
    r.add_argument("--doc", help="the Markdown file to write (default: the config's `report` path)")
    r.set_defaults(func=run_report)
    return parser


def run_experiment(args: argparse.Namespace) -> dict:
    from lab.experiment import run_matrix

    return run_matrix(args.config, out=args.out, only=args.only, results=args.results, dry_run=args.dry_run,
                      progress=not args.quiet, rerun_changed=args.rerun_changed,
                      threads=args.threads, rerun=args.rerun)  # fmt: skip


def run_report(args: argparse.Namespace) -> dict:
    from lab.report import write_report

    return write_report(args.config, results=args.results, doc=args.doc)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # no COMMAND: a one-line usage error, status 2
    level = logging.INFO if args.verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    # model cards of the runs quote this command, not `bertkit` (what sys.argv[0], __main__.py, would give)
    set_command(["python", "-m", "lab", *(sys.argv[1:] if argv is None else map(str, argv))])
    try:
        result = args.func(args)
    except UserError as e:
        print(f"{PROG} {args.command}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # a cell's training stopped by a signal says where its checkpoint is
        if hasattr(e, "exit_status"):
            print(f"{PROG} {args.command}: {e}; run the same command to continue", file=sys.stderr)
            return e.exit_status
        print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return 130
    print(json.dumps(result, indent=2, ensure_ascii=False))
    # a matrix whose cells failed did not succeed: a script or scheduler must see it (the summary says which)
    return 1 if args.command == "experiment" and result.get("failed") else 0


if __name__ == "__main__":
    sys.exit(main())
