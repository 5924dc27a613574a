"""Parity with the original BERT release's run_squad.py on real data.

The golden digests below were produced once, outside this repository, by running the original release's
``read_squad_examples`` / ``convert_examples_to_features`` / ``write_predictions`` (with its own
``tokenization.FullTokenizer`` on the same vocabulary) through the same ``*_digest`` functions defined
here, on the same slices of the shared dev files and the same deterministic logits. Equal digests mean
every window, token, segment id, token->word map, max-context flag, training target, prediction, n-best
entry (text, probability, logits) and null-odds value is identical.
"""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from bertkit.tasks import squad as S
from bertkit.tasks import squad_postprocess as P
from bertkit.tokenizer import Tokenizer

# (file, articles kept, version 2, is_training, max_seq_length, doc_stride)
CASES = {
    "v1-train-384": ("dev-v1.1.json", 6, False, True, 384, 128),
    "v1-eval-192": ("dev-v1.1.json", 4, False, False, 192, 64),
    "v2-train-192": ("dev-v2.0-half.json", 4, True, True, 192, 64),
    "v2-eval-256": ("dev-v2.0-half.json", 4, True, False, 256, 100),
}


def case_data(path, articles: int) -> dict:
    data = json.loads(path.read_text(encoding="utf-8"))
    data["data"] = data["data"][:articles]
    for a in data["data"]:  # the original demands exactly one answer in training; bertkit uses the first
        for p in a["paragraphs"]:
            for qa in p["qas"]:
                qa["answers"] = qa["answers"][:1]
    return data


def feature_digest(features) -> str:
    """Digest of everything the model and post-processing see; ``input_ids``/``segment_ids`` unpadded."""
    h = hashlib.sha256()
    for f in features:
        n = len(f.tokens)
        segment_ids = getattr(f, "token_type_ids", None) or f.segment_ids
        rec = [
            f.unique_id,
            f.example_index,
            f.doc_span_index,
            f.tokens,
            list(f.input_ids[:n]),
            list(segment_ids[:n]),
            sorted(f.token_to_orig_map.items()),
            sorted((k, bool(v)) for k, v in f.token_is_max_context.items()),
            f.start_position,
            f.end_position,
        ]
        h.update(json.dumps(rec, ensure_ascii=False).encode("utf-8"))
    return h.hexdigest()


def fake_logits(unique_id: int, length: int) -> tuple[list[float], list[float]]:
    """Deterministic logits with many ties (one decimal), position 0 sometimes high (null answers)."""
    rng = random.Random(unique_id)
    start = [round(rng.gauss(0.0, 3.0), 1) for _ in range(length)]
    end = [round(rng.gauss(0.0, 3.0), 1) for _ in range(length)]
    if unique_id % 3 == 0:
        start[0] += 6.0
        end[0] += 6.0
    return start, end


def prediction_digest(predictions: dict, nbest: dict, null_odds: dict) -> str:
    rec = [
        sorted(predictions.items()),
        sorted(
            (k, [[e["text"], e["probability"], e["start_logit"], e["end_logit"]] for e in v])
            for k, v in nbest.items()
        ),
        sorted(null_odds.items()),
    ]
    return hashlib.sha256(json.dumps(rec, ensure_ascii=False).encode("utf-8")).hexdigest()


GOLDEN_FEATURES: dict[str, str] = {
    "v1-eval-192": "35083caf776cfb71634ff0e114ce5bc7438a8e7e153f9fcd3a1474955ad0899b",
    "v1-train-384": "63f3e06e3e06d7f11cc9de0132cd596817f29c9347ccdf030af1bead31938d4f",
    "v2-eval-256": "4790559b915f7c752de4f847ee0341ec6b81d55342e5d5fa5b7e863e64302c2f",
    "v2-train-192": "a7bc6319c82c03126fde7c98707f906ce0a0ec6ffc7b6ba4b6ab949bd4a8ea7a",
}
GOLDEN_PREDICTIONS: dict[str, str] = {
    "v1-eval-192": "34c371cf886b28773f5dbaee17a084d8281715d779714cd83aeb5134136ab22a",
    "v2-eval-256": "19c1c0acd22e24419d7094de1d85338a5ae6d39ac4a9e94c422bcdd86251ae36",
}


@pytest.fixture(scope="module")
def vocab_tok(shared_data):
    return Tokenizer(shared_data / "vocab" / "bert-base-uncased-vocab.txt", lowercase=True)


def _features(shared_data, vocab_tok, case):
    name, articles, v2, training, max_len, stride = CASES[case]
    data = case_data(shared_data / "squad" / name, articles)
    examples, _ = S.read_squad_examples(data, is_training=training, version_2_with_negative=v2)
    feats = S.convert_examples_to_features(examples, vocab_tok, max_len, stride, 64, is_training=training)
    return examples, feats


@pytest.mark.parametrize("case", sorted(CASES))
def test_features_equal_original(shared_data, vocab_tok, case):
    _, feats = _features(shared_data, vocab_tok, case)
    assert feature_digest(feats) == GOLDEN_FEATURES[case]


@pytest.mark.parametrize("case", ["v1-eval-192", "v2-eval-256"])
def test_predictions_equal_original(shared_data, vocab_tok, case):
    examples, feats = _features(shared_data, vocab_tok, case)
    v2, max_len = CASES[case][2], CASES[case][4]
    # full padded length, as the original saw it (positions past the window are skipped as invalid)
    results = [P.RawResult(f.unique_id, *fake_logits(f.unique_id, max_len)) for f in feats]
    p = P.compute_predictions(examples, feats, results, 20, 30, True, v2, 0.0)
    assert prediction_digest(p.predictions, p.nbest, p.null_odds) == GOLDEN_PREDICTIONS[case]
