"""The one JSON Lines reader (bertkit.io.read_jsonl) and its callers: `bertkit embed`, `bertkit index`, the
retrieval data files, `bertkit distill --texts` and classification files; each refuses a bad line in one
line naming the file and the line."""

from __future__ import annotations

import pytest

from bertkit.cli import main as cli_main
from bertkit.errors import UserError
from bertkit.io import read_jsonl
from bertkit.tasks.classify import read_classify

BAD = {
    "not JSON": (
        b'{"text": "a", "id": 1, "vector": [1.0], "relevant": [1]}\n{"text": \n',
        "line 2: not valid JSON",
    ),
    "not UTF-8": (
        b'{"text": "a", "id": 1, "vector": [1.0], "relevant": [1]}\n{"text": "caf\xe9"}\n',
        ":2: not UTF-8",
    ),
}


def test_read_jsonl_skips_blank_lines_and_a_byte_order_mark(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes('\ufeff{"a": 1}\n\n  \n"text"\n[1, 2]\n'.encode())
    assert list(read_jsonl(path)) == [(1, {"a": 1}), (4, "text"), (5, [1, 2])]
    with pytest.raises(UserError, match=r"a\.jsonl: line 4: expected a JSON object"):
        list(read_jsonl(path, objects=True))
    with pytest.raises(UserError, match="input file not found"):
        list(read_jsonl(tmp_path / "missing.jsonl", "input file"))


@pytest.mark.parametrize("case", sorted(BAD))
def test_read_jsonl_names_file_and_line(tmp_path, case):
    data, message = BAD[case]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(data)
    with pytest.raises(UserError, match=message) as err:
        list(read_jsonl(path))
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def _one_line_error(capsys, argv: list[str], path, message: str) -> None:
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and message in err, err


@pytest.mark.parametrize("case", sorted(BAD))
def test_every_caller_refuses_a_bad_line_in_one_line(tmp_path, capsys, case):
    """The files are refused before any model is loaded: the model folder here is empty."""
    data, message = BAD[case]
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(data)
    (tmp_path / "empty").mkdir()
    no_model = str(tmp_path / "empty")
    _one_line_error(
        capsys, ["embed", no_model, "--input", str(bad), "--out", str(tmp_path / "o.npy")], bad, message
    )
    _one_line_error(capsys, ["index", "build", str(tmp_path / "idx"), "--input", str(bad)], bad, message)
    ok = tmp_path / "corpus.jsonl"
    ok.write_text('{"id": 1, "text": "a"}\n')
    argv = ["evaluate", "retrieval", "--model", no_model, "--queries", str(bad), "--corpus", str(ok)]
    _one_line_error(capsys, argv, bad, message)
    argv = ["distill", "--teacher", no_model, "--student", "layers:0", "--task", "embed", "--texts", str(bad)]
    _one_line_error(capsys, [*argv, "--out", str(tmp_path / "d")], bad, message)
    with pytest.raises(UserError, match=message) as err:  # finetune classify's reader
        read_classify(bad)
    assert str(bad) in str(err.value)
