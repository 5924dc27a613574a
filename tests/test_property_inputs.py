"""Property tests (Hypothesis): the tokenizer and the corpus/GLUE/classify/NER/SQuAD readers, given arbitrary
Unicode (lone surrogates and control characters included) or arbitrary bytes (invalid UTF-8), either work or
raise the project's one-line UserError, never anything else. Example counts are kept small (suite time)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from bertkit.errors import UserError  # noqa: E402
from bertkit.tokenizer import Tokenizer  # noqa: E402

# every code point, surrogates (category Cs) and control characters included
ANY_CHAR = st.characters(codec=None, exclude_categories=())
ANY_TEXT = st.text(alphabet=ANY_CHAR, max_size=40) | st.sampled_from(
    ["", " ", "\ud800", "[SEP] [CLS]", "a\x00b"]
)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def tok(tiny_data) -> Tokenizer:
    return Tokenizer(str(tiny_data / "vocab.txt"))


def _ok_or_user_error(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except UserError as e:
        assert "\n" not in str(e) and str(e)
        return None


@SETTINGS
@given(texts=st.lists(ANY_TEXT, min_size=1, max_size=4), data=st.data())
def test_tokenizer_works_or_raises_user_error(tok, texts, data):
    pairs = data.draw(st.none() | st.lists(ANY_TEXT, min_size=len(texts), max_size=len(texts)))
    max_length = data.draw(st.none() | st.integers(min_value=-2, max_value=20))
    out = _ok_or_user_error(tok, texts, pairs, max_length=max_length, return_tensors=None, padding=False)
    if out is not None:
        for ids in out["input_ids"]:
            assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
            assert all(0 <= i < len(tok) for i in ids)
            if max_length is not None:
                assert len(ids) <= max_length
    for i, t in enumerate(texts):
        enc = _ok_or_user_error(tok.encode, t, None if pairs is None else pairs[i], max_length=max_length)
        if enc is not None and out is not None:
            assert enc.ids == out["input_ids"][i]  # one text alone = the same text in a batch
        _ok_or_user_error(tok.tokenize, t)


ANY_BYTES = st.binary(max_size=300) | st.text(alphabet=ANY_CHAR, max_size=100).map(
    lambda s: s.encode("utf-8", "surrogatepass")
)


def _file(name: str, content: bytes) -> Path:
    d = Path(tempfile.mkdtemp(prefix="bertkit-prop-"))
    (d / name).write_bytes(content)
    return d / name


@SETTINGS
@given(content=ANY_BYTES, fmt=st.sampled_from(["lines", "prose", "file", "jsonl"]))
def test_corpus_reader(content, fmt):
    from bertkit.data.corpus import read_documents

    path = _file("c.jsonl" if fmt == "jsonl" else "c.txt", content)
    docs = _ok_or_user_error(read_documents, [path], fmt)
    assert docs is None or all(isinstance(s, str) for d in docs for s in d)


@SETTINGS
@given(body=ANY_BYTES, head=st.sampled_from([b"sentence\tlabel\n", b"", b"sentence\tlabel\nok\t1\n"]))
def test_glue_reader(body, head):
    from bertkit.tasks.glue import read_glue

    path = _file("train.tsv", head + body)
    exs = _ok_or_user_error(read_glue, "SST-2", path.parent, "train")
    assert exs is None or all(isinstance(e.text_a, str) for e in exs)


@SETTINGS
@given(body=ANY_BYTES, suffix=st.sampled_from([".csv", ".tsv", ".jsonl"]))
def test_classify_reader(body, suffix):
    from bertkit.tasks.classify import read_classify

    head = {".csv": b"text,label\n", ".tsv": b"text\tlabel\n", ".jsonl": b'{"text": "a", "label": "x"}\n'}[
        suffix
    ]
    path = _file("in" + suffix, head + body)
    _ok_or_user_error(read_classify, path, "text", "text_pair", "label")


@SETTINGS
@given(body=ANY_BYTES)
def test_conll_reader(body):
    from bertkit.tasks.ner import read_conll

    sents = _ok_or_user_error(read_conll, _file("ner.txt", b"EU B-ORG\n\n" + body))
    assert sents is None or all(len(s.words) == len(s.tags) for s in sents)


@SETTINGS
@given(context=st.text(alphabet=ANY_CHAR, max_size=60), question=ANY_TEXT, start=st.integers(-3, 70),
       answer=ANY_TEXT, raw=ANY_BYTES)  # fmt: skip
def test_squad_reader(context, question, start, answer, raw):
    from bertkit.tasks.squad import read_squad_examples

    qa = {"id": "q1", "question": question, "answers": [{"text": answer, "answer_start": start}]}
    doc = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": [qa]}]}]}
    path = _file("squad.json", json.dumps(doc).encode())
    for is_training in (True, False):
        _ok_or_user_error(read_squad_examples, path, is_training)
    _ok_or_user_error(read_squad_examples, _file("raw.json", raw), False)
