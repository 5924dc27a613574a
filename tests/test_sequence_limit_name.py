"""Inside the package the sequence limit has one name, ``max_seq_length``. ``max_length`` stays only where
bertkit mirrors another library's API or its own command line; ``max_len`` nowhere. (``seq_len`` is the length
of a batch's sequences, a tensor dimension, not the limit.)"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# where `max_length` is an API bertkit mirrors, with the reason
MAX_LENGTH_KEPT = {
    "bertkit/tokenizer.py": "transformers' tokenizer call: tok(texts, max_length=...)",
    "bertkit/cli/core.py": "bertkit tokenize --max-length",
    "bertkit/cli/serve.py": "bertkit serve --max-length",
    "bertkit/cli/predict_spans.py": "InferenceService(max_length=...), the server's flag",
    "bertkit/serving/service.py": "InferenceService(max_length=...), and its tokenizer calls",
    "bertkit/model.py": "the error names the tokenizer's argument",
    "bertkit/cli/retrieval.py": "bertkit train-rerank --max-length",
    "bertkit/embed.py": "CrossEncoder(max_length=...), as sentence-transformers' CrossEncoder",
    "bertkit/retrieval/": "the same CrossEncoder's training settings",
    "bertkit/sentence/": "the same CrossEncoder's training settings",
}


def _names(tree: ast.AST) -> set[str]:
    """Every identifier a module binds or reads: names, arguments, attributes, keyword arguments."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.keyword) and node.arg:
            out.add(node.arg)
    return out


def test_the_sequence_limit_is_called_max_seq_length():
    found = []
    for path in sorted((ROOT / "bertkit").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        names = _names(ast.parse(path.read_text(encoding="utf-8")))
        if "max_len" in names:
            found.append(f"{rel}: max_len")
        if "max_length" in names and not any(rel.startswith(k) for k in MAX_LENGTH_KEPT):
            found.append(f"{rel}: max_length")
    assert not found, "call the sequence limit max_seq_length: " + ", ".join(found)
