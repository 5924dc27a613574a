"""The bertkit command: help, info, tokenize, and errors that exit 2 with a message."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bertkit.cli import main


def test_help_lists_subcommands(capsys):
    assert main([]) == 2
    out = capsys.readouterr().out
    assert "info" in out and "tokenize" in out


def test_console_script_runs():
    result = subprocess.run(
        [sys.executable, "-m", "bertkit", "--version"], capture_output=True, text=True, check=True
    )
    assert result.stdout.startswith("bertkit ")


def test_info_reports_config_parameters_and_vocab(minilm_dir, capsys):
    assert main(["info", str(minilm_dir)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["config"]["hidden_size"] == 384 and info["config"]["num_hidden_layers"] == 6
    assert info["vocab_size"] == 30522
    assert 22_000_000 < info["parameters"] < 23_000_000  # all-MiniLM-L6-v2 has 22.7M


def test_tokenize_pair(minilm_dir, capsys):
    assert main(["tokenize", str(minilm_dir), "Unaffable!", "Second"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tokens"] == ["[CLS]", "una", "##ffa", "##ble", "!", "[SEP]", "second", "[SEP]"]
    assert out["type_ids"] == [0, 0, 0, 0, 0, 0, 1, 1]


def test_bad_directory_exits_2_with_message(tmp_path, capsys):
    assert main(["info", str(tmp_path / "nope")]) == 2
    assert "config file not found" in capsys.readouterr().err


def _subparser(parser, names):
    import argparse

    for name in names:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


@pytest.mark.parametrize(
    "command,flags",
    [
        (["serve"], ["--host", "--port", "--max-connections", "--read-timeout", "--keep-alive"]),
        (["serve"], ["--max-fill-mask-predictions"]),
        (["train-embed"], ["--epochs", "--batch-size", "--lr", "--warmup-ratio", "--seed"]),
        (["prepare"], ["--workers"]),
        (["index", "search"], ["--batch-size", "--text-field"]),
        (["index", "add"], ["--batch-size", "--lock-timeout"]),
    ],
)
def test_flags_a_newcomer_reads_have_help_and_their_default(command, flags):
    from bertkit.cli import build_parser

    parser = _subparser(build_parser(), command)
    helps = {s: a.help or "" for a in parser._actions for s in a.option_strings}
    for flag in flags:
        assert "default" in helps[flag] or "%(default)" in helps[flag], (command, flag, helps[flag])
    if command == ["index", "search"]:
        assert "commit" not in helps["--batch-size"]  # it had build's help, about commits


def test_serve_docs_says_its_page_needs_a_cdn():
    """The offline rule: the /docs page's assets come from a CDN, and the flag says so."""
    pytest.importorskip("fastapi", reason="serve extra not installed")
    from fastapi.openapi.docs import get_swagger_ui_html

    from bertkit.cli import build_parser

    page = get_swagger_ui_html(openapi_url="/openapi.json", title="t").body.decode()
    assert "https://" in page  # FastAPI's page does load its scripts from the network
    docs = next(a for a in _subparser(build_parser(), ["serve"])._actions if "--docs" in a.option_strings)
    assert "CDN" in docs.help and "/openapi.json" in docs.help
