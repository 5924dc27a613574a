"""The README's command-line summary of `bertkit finetune` offers only options that `--help` has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUBS = ("glue", "classify", "squad", "ner", "swag")


def _options(sub: str) -> set[str]:
    from bertkit.cli import build_parser

    parser = build_parser()
    finetune = next(a for a in parser._subparsers._group_actions[0].choices.items() if a[0] == "finetune")[1]
    p = finetune._subparsers._group_actions[0].choices[sub]
    return {s for a in p._actions for s in a.option_strings}


def _claims() -> dict[str, set[str]]:
    """{subcommand: options the README says it takes}."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    claims: dict[str, set[str]] = {s: set() for s in SUBS}
    current: tuple[str, ...] = ()
    for line in lines:
        m = re.match(r"bertkit finetune ([a-z|]+) ", line)
        if m:
            current = tuple(m.group(1).split("|"))
        elif line.startswith("every finetune:"):
            current = SUBS
        elif not line.startswith(" "):
            current = ()
        if not current:
            continue
        body, _, comment = line.partition("#")
        for s in current:
            claims[s] |= set(re.findall(r"--[a-z][a-z-]+", body))
        for name, flags in re.findall(r"(\w+) also: ((?:\[--[a-z-]+\]\s*)+)", comment):
            claims[name] |= set(re.findall(r"--[a-z][a-z-]+", flags))
    return claims


def test_readme_lists_every_finetune_subcommand():
    claims = _claims()
    assert all(claims[s] for s in SUBS), claims
    assert "--restarts" in claims["glue"] and "--restarts" not in claims["squad"]


@pytest.mark.parametrize("sub", SUBS)
def test_readme_options_exist(sub):
    missing = _claims()[sub] - _options(sub)
    assert not missing, f"README offers {sorted(missing)} for `finetune {sub}`, which --help does not have"
