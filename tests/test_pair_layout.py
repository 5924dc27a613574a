"""Which layout a tokenizer gives a pair of texts: BERT's for WordPiece without asking the tokenizer, the
tokenizer.json's own template otherwise, probed once per tokenizer (the server asks on every request)."""

from __future__ import annotations

import pytest
from bpe_folder import modernbert_folder

from bertkit.pair_layout import PairLayout, pair_layout
from bertkit.tokenizer import Tokenizer


def test_a_wordpiece_tokenizer_gets_berts_layout_without_encoding_anything(tmp_path, monkeypatch):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]) + "\n")
    tok = Tokenizer(str(vocab))
    monkeypatch.setattr(tok, "encode", lambda *a, **k: pytest.fail("WordPiece's layout needs no probe"))
    layout = pair_layout(tok)
    assert layout == PairLayout.bert(2, 3)
    assert layout.window([5], [6]) == ([2, 5, 3, 6, 3], [0, 0, 0, 1, 1])


def test_a_tokenizer_json_is_probed_once_and_its_layout_kept(tmp_path, monkeypatch):
    modernbert_folder(tmp_path / "m")
    tok = Tokenizer.from_pretrained(tmp_path / "m")
    calls = []
    encode = tok.encode
    monkeypatch.setattr(tok, "encode", lambda *a, **k: calls.append(a) or encode(*a, **k))
    first = pair_layout(tok)
    probes = len(calls)
    assert probes > 0 and pair_layout(tok) is first and len(calls) == probes
    cls_id, sep_id = tok.cls_token_id, tok.sep_token_id
    assert first == PairLayout.bert(cls_id, sep_id)  # ModernBERT's template is BERT's
    other = Tokenizer.from_pretrained(tmp_path / "m")  # a second load is a second tokenizer: probed anew
    other_calls = []
    other_encode = other.encode
    monkeypatch.setattr(other, "encode", lambda *a, **k: other_calls.append(a) or other_encode(*a, **k))
    assert pair_layout(other) == first and len(other_calls) == probes
