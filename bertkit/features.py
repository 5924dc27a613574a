"""The feature-based approach (paper, section 5.3): fixed BERT activations as input to another model.

- ``extract_features(model, tok, texts, layers)``: per-token features of each text (``[CLS]``/``[SEP]``
  included) from the chosen layers, concatenated; layer -1 is the last encoder layer, 0 the embeddings.
  The default is the paper's best feature set, the last four hidden layers concatenated.
- ``word_features``: the same for pre-split words, taking each word's first sub-token (as fine-tuning does).
- ``BiLSTMTagger`` / ``feature_ner``: NER on frozen features with a two-layer bidirectional LSTM and a
  linear classifier, as in the paper's feature-based CoNLL-2003 experiment, trained with the generic
  :class:`bertkit.train.Trainer`. Nothing in BERT is trained.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from bertkit.errors import UserError
from bertkit.io import atomic_write, atomic_write_json
from bertkit.model import BertModel
from bertkit.tasks.encoding import Feature, collate, encode_pairs, encode_tokens, length_batches
from bertkit.tokenizer import Tokenizer
from bertkit.train import LengthGroupedBatches, Trainer, read_jsonl
from bertkit.train.options import Checkpointing, Numerics, Reporting, Schedule

DEFAULT_LAYERS = (-1, -2, -3, -4)


def parse_layers(spec: str | Sequence[int]) -> tuple[int, ...]:
    if isinstance(spec, str):
        try:
            return tuple(int(x) for x in spec.split(",") if x.strip())
        except ValueError:
            raise UserError(
                f"--layers {spec!r}: expected comma-separated integers such as -1,-2,-3,-4"
            ) from None
    return tuple(int(x) for x in spec)


def _select(hidden_states: tuple[Tensor, ...], layers: Sequence[int]) -> Tensor:
    n = len(hidden_states)  # embeddings + L layers
    picked = []
    for layer in layers:
        idx = layer if layer >= 0 else n + layer
        if not 0 <= idx < n:
            raise UserError(
                f"layer {layer} does not exist: the model has layers 0 (embeddings) .. {n - 1} "
                f"(-1 .. -{n}); choose others with --layers, e.g. --layers {','.join(str(-i) for i in range(1, n))}"
            )
        picked.append(hidden_states[idx])
    return torch.cat(picked, dim=-1)


def load_encoder(model_dir: str | Path) -> tuple[BertModel, Tokenizer]:
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise UserError(f"{model_dir}: no config.json; pass a model directory in the HF layout")
    model = BertModel.from_pretrained(model_dir).eval()
    return model, Tokenizer.from_pretrained(model_dir)


@torch.no_grad()
def extract_features(
    model: BertModel,
    tok: Tokenizer,
    texts: Sequence[str],
    layers: Sequence[int] = DEFAULT_LAYERS,
    pairs: Sequence[str | None] | None = None,
    max_seq_length: int = 128,
    batch_size: int = 32,
    progress: bool = False,
) -> list[tuple[list[str], np.ndarray]]:
    """For each text (pair): its tokens and a float32 array [n_tokens, len(layers) * hidden]."""
    model.eval()
    packed = encode_pairs(
        tok, list(texts), list(pairs) if pairs is not None else [None] * len(texts), max_seq_length
    )
    feats = [Feature(ids, types, None, n) for n, (ids, types) in enumerate(packed)]
    out: list = [None] * len(feats)
    for idx in tqdm(
        length_batches([len(f) for f in feats], batch_size), desc="features", disable=not progress
    ):
        batch = collate([feats[i] for i in idx], "seq", tok.pad_token_id)
        hs = model(**batch, output_hidden_states=True).hidden_states
        x = _select(hs, layers).float()
        for r, i in enumerate(idx):
            n = len(feats[i].input_ids)
            out[i] = (tok.convert_ids_to_tokens(feats[i].input_ids), x[r, :n].numpy())
    return out


@torch.no_grad()
def word_features(
    model: BertModel,
    tok: Tokenizer,
    sentences: Sequence,
    layers: Sequence[int] = DEFAULT_LAYERS,
    max_seq_length: int = 128,
    batch_size: int = 32,
    dtype: torch.dtype = torch.float16,
    progress: bool = False,
) -> list[Tensor]:
    """Per sentence (objects with ``.words``): a tensor [n_words, len(layers) * hidden] of each word's first
    sub-token; sentences longer than ``max_seq_length`` pieces are encoded in windows of whole words."""
    model.eval()
    # no tags: every word's first sub-token is labelled 0, the positions read out below
    feats = encode_tokens(
        tok, [SimpleNamespace(words=s.words, tags=None) for s in sentences], {}, max_seq_length
    )
    dim = len(layers) * model.config.hidden_size
    out = [torch.zeros(len(s.words), dim, dtype=dtype) for s in sentences]
    for idx in tqdm(
        length_batches([len(f) for f in feats], batch_size), desc="features", disable=not progress
    ):
        fs = [feats[i] for i in idx]
        batch = collate(fs, "token", tok.pad_token_id)
        labels = batch.pop("labels")
        x = _select(model(**batch, output_hidden_states=True).hidden_states, layers)
        for r, f in enumerate(fs):
            pos = (labels[r] != -100).nonzero().squeeze(1)
            out[f.example][f.word_start : f.word_start + len(pos)] = x[r, pos].to(dtype)
    return out


class BiLSTMTagger(nn.Module):
    """Two-layer BiLSTM over fixed word features, then a linear layer to the tags.

    ``mix=n``: the input is n concatenated layers of equal width and the tagger first takes their weighted
    sum with learned softmax weights and a scale (ELMo's scalar mix; the paper's "weighted sum" rows)."""

    def __init__(
        self, input_size: int, num_labels: int, hidden_size: int = 256, dropout: float = 0.2, mix: int = 0
    ) -> None:
        super().__init__()
        self.mix = int(mix)
        if self.mix:
            if input_size % self.mix:
                raise ValueError(f"input size {input_size} is not {self.mix} equal layers")
            self.mix_weights = nn.Parameter(torch.zeros(self.mix))
            self.mix_scale = nn.Parameter(torch.ones(()))
            input_size //= self.mix
        self.dropout = nn.Dropout(dropout)
        self.lstm = nn.LSTM(
            input_size, hidden_size, num_layers=2, bidirectional=True, batch_first=True, dropout=dropout
        )
        self.classifier = nn.Linear(2 * hidden_size, num_labels)

    def forward(self, x: Tensor, lengths: Tensor) -> Tensor:
        """x: [B, T, input_size], lengths: [B] -> tag logits [B, T, num_labels]."""
        if self.mix:
            layers = x.view(*x.shape[:-1], self.mix, -1)  # [B, T, n, H]
            x = self.mix_scale * (layers * self.mix_weights.softmax(0)[:, None]).sum(-2)
        packed = nn.utils.rnn.pack_padded_sequence(
            self.dropout(x), lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        h, _ = self.lstm(packed)
        h, _ = nn.utils.rnn.pad_packed_sequence(h, batch_first=True, total_length=x.size(1))
        return self.classifier(self.dropout(h))


def _pad(xs: list[Tensor]) -> tuple[Tensor, Tensor]:
    lengths = torch.tensor([len(x) for x in xs])
    out = torch.zeros(len(xs), int(lengths.max()), xs[0].size(-1))
    for i, x in enumerate(xs):
        out[i, : len(x)] = x.float()
    return out, lengths


def _collate_tagged(items: list[tuple[Tensor, Tensor]]) -> dict[str, Tensor]:
    """(word features, tag ids) pairs -> padded ``x``, ``lengths`` and ``y`` (-100 on padding)."""
    x, lengths = _pad([f for f, _ in items])
    y = torch.full(x.shape[:2], -100, dtype=torch.long)
    for r, (_, tags) in enumerate(items):
        y[r, : len(tags)] = tags
    return {"x": x, "lengths": lengths, "y": y}


def _tagger_loss(tagger: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    logits = tagger(batch["x"], batch["lengths"])
    return nn.functional.cross_entropy(
        logits.reshape(-1, logits.size(-1)), batch["y"].reshape(-1), ignore_index=-100
    )


@torch.no_grad()
def _tag(
    tagger: BiLSTMTagger, feats: list[Tensor], labels: list[str], batch_size: int = 64
) -> list[list[str]]:
    tagger.eval()
    preds: list = [None] * len(feats)
    for idx in length_batches([len(f) for f in feats], batch_size):
        x, lengths = _pad([feats[i] for i in idx])
        pred = tagger(x, lengths).argmax(-1)
        for r, i in enumerate(idx):
            preds[i] = [labels[j] for j in pred[r, : lengths[r]].tolist()]
    return preds


def feature_ner(
    train: Sequence,
    dev: Sequence,
    model_dir: str | Path,
    out_dir: str | Path,
    test: Sequence | None = None,
    layers: Sequence[int] = DEFAULT_LAYERS,
    epochs: int = 4,
    batch_size: int = 32,
    lr: float = 1e-3,
    hidden_size: int = 256,
    max_seq_length: int = 128,
    seed: int = 42,
    progress: bool = True,
    name: str = "ner-feature-based",
    checkpoint_every: int = 0,
    resume: bool = False,
    precision: str = "fp32",
    combine: str = "concat",
) -> dict:
    """Train a BiLSTM tagger on frozen BERT word features; evaluate with conlleval F1; write metrics.json.

    ``combine``: ``concat`` feeds the chosen layers side by side; ``weighted_sum`` a learned softmax-weighted
    sum of them (see :class:`BiLSTMTagger`).

    Training runs on :class:`bertkit.train.Trainer` (Adam, linear decay to 0, gradient clipping 5.0), so it
    writes ``OUT/metrics.jsonl`` and ``OUT/curves.png`` too, and takes ``checkpoint_every``/``resume``/
    ``precision`` as fine-tuning does (the features are extracted again on resume: they are deterministic)."""
    from bertkit.tasks.metrics import conll_scores
    from bertkit.tasks.ner import label_list
    from bertkit.tasks.outputs import plot_losses

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    labels = label_list(list(train))
    label2id = {lab: i for i, lab in enumerate(labels)}
    for split, sents in (("dev", dev), ("test", test or [])):
        for s in sents:
            for t in s.tags:
                if t not in label2id:
                    raise UserError(
                        f"{split}: label {t!r} does not occur in the training data (labels: {labels})"
                    )
    t0 = time.time()
    encoder, tok = load_encoder(model_dir)
    ftrain = word_features(encoder, tok, train, layers, max_seq_length, progress=progress)
    fdev = word_features(encoder, tok, dev, layers, max_seq_length, progress=progress)
    ftest = word_features(encoder, tok, test, layers, max_seq_length, progress=progress) if test else None
    extract_s = time.time() - t0
    del encoder

    torch.manual_seed(seed)  # the tagger's initialisation
    if combine not in ("concat", "weighted_sum"):
        raise UserError(f"combine must be 'concat' or 'weighted_sum', not {combine!r}")
    mix = len(layers) if combine == "weighted_sum" and len(layers) > 1 else 0
    tagger = BiLSTMTagger(ftrain[0].size(-1), len(labels), hidden_size, mix=mix)
    items = [(x, torch.tensor([label2id[t] for t in s.tags])) for x, s in zip(ftrain, train)]
    batches = LengthGroupedBatches(
        items, batch_size, _collate_tagged, lengths=[len(x) for x in ftrain], seed=seed
    )
    steps = batches.steps_per_epoch() * epochs
    opt = torch.optim.Adam(tagger.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: max(0.0, 1 - k / steps))  # linear decay to 0
    trainer = Trainer(
        tagger, opt, sched, train_batches=batches, out_dir=out,
        schedule=Schedule(max_steps=steps, seed=seed),
        numerics=Numerics(precision=precision, clip_norm=5.0),
        reporting=Reporting(log_every=1, progress=progress, desc="bilstm"),
        checkpointing=Checkpointing(checkpoint_every=checkpoint_every),
        loss_fn=_tagger_loss, tokens_fn=lambda b: int(b["lengths"].sum()),
    )  # fmt: skip
    t1 = time.time()
    trainer.fit(resume=resume)
    losses = [r["loss"] for r in read_jsonl(out / "metrics.jsonl")]
    tagger.cpu()  # the features being tagged live on the CPU
    train_s = time.time() - t1
    dev_scores = conll_scores([s.tags for s in dev], _tag(tagger, fdev, labels))
    result = {
        "task": name,
        "split": "dev",
        "metrics": dev_scores,
        "examples": len(dev),
        "train_examples": len(train),
        "hyperparameters": {
            "layers": list(layers),
            "combine": combine,
            "epochs": epochs,
            "batch_size": batch_size,
            "lr": lr,
            "hidden_size": hidden_size,
            "max_seq_length": max_seq_length,
            "seed": seed,
        },
        "seconds": {"extract": round(extract_s, 2), "train": round(train_s, 2)},
    }
    if test:
        result["test"] = {
            "metrics": conll_scores([s.tags for s in test], _tag(tagger, ftest, labels)),
            "examples": len(test),
        }
    torch.save(
        {"state_dict": tagger.state_dict(), "labels": labels, "layers": list(layers), "mix": mix},
        out / "bilstm_tagger.pt",
    )
    plot_losses(losses, out / "loss.png", f"{name}: BiLSTM on layers {list(layers)}")
    atomic_write_json(out / "metrics.json", result)
    return result


def write_features(path: str | Path, rows: list[tuple[list[str], np.ndarray]], decimals: int = 6) -> None:
    """``.npz``: ``features`` [total_tokens, D] float32, ``offsets`` [N + 1], ``tokens``; otherwise JSON lines
    ``{"index", "tokens", "features"}``."""
    path = Path(path)
    if path.suffix == ".npz":
        offsets = np.cumsum([0] + [len(t) for t, _ in rows])
        feats = np.concatenate([f for _, f in rows]) if rows else np.zeros((0, 0), np.float32)
        tokens = np.array([t for ts, _ in rows for t in ts])
        with atomic_write(path, "wb") as f:
            np.savez(f, features=feats.astype(np.float32), offsets=offsets, tokens=tokens)
        return
    with atomic_write(path) as f:
        for i, (tokens, feats) in enumerate(rows):
            f.write(
                json.dumps({"index": i, "tokens": tokens, "features": np.round(feats, decimals).tolist()})
                + "\n"
            )
