"""A small ModernBERT-style tokenizer folder (byte-level BPE tokenizer.json trained here on generated text),
for the tests of the BPE tokenizer and of ModernBERT's downstream commands."""

from __future__ import annotations

import json
import random

from tokenizers import AddedToken, decoders, models, normalizers, pre_tokenizers, processors, trainers
from tokenizers import Tokenizer as RustTokenizer

SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
WORDS = (
    "the of and to in is was for on that with as by at from his her it an were are which this be or "
    "river mountain café naïve résumé Straße İstanbul 東京 日本語 😀 don't it's 3.14 1,000 $5 50% #tag @user "
    "(parenthesis) [bracket] {brace} <angle> e-mail well-known co-operate ñandú Ωmega"
).split()
SPACES = [" "] * 12 + ["  ", "\n", "\n\n", "\t", " \n "]


def generated_texts(n: int, seed: int) -> list[str]:
    """Sentences of the word list joined by assorted whitespace (byte-level tokens carry it)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(1, 30)
        text = "".join(rng.choice(WORDS) + rng.choice(SPACES) for _ in range(k))
        out.append(text if rng.random() < 0.5 else text.strip())
    return out


def build_folder(path, texts: list[str], vocab_size: int = 700) -> None:
    """A ModernBERT-style folder: NFC, byte-level BPE, [CLS] A [SEP] (B [SEP]), [MASK] that strips left."""
    tok = RustTokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts, trainer)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, normalized=False, special=True)])
    path.mkdir(parents=True, exist_ok=True)
    tok.save(str(path / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 64,
        "model_input_names": ["input_ids", "attention_mask"],
        "clean_up_tokenization_spaces": False,
        **{f"{t[1:-1].lower()}_token": t for t in SPECIALS},
    }
    (path / "tokenizer_config.json").write_text(json.dumps(config))


def tiny_modernbert_config(path, **overrides):
    """transformers' ``ModernBertConfig`` of a tiny model (window 16, a global layer every 2nd) whose special
    tokens are those of the tokenizer folder ``path``."""
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(path)
    settings = dict(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=2,
        intermediate_size=48,
        global_attn_every_n_layers=2,
        local_attention=16,
        pad_token_id=tok.pad_token_id,
        cls_token_id=tok.cls_token_id,
        sep_token_id=tok.sep_token_id,
        bos_token_id=tok.cls_token_id,
        eos_token_id=tok.sep_token_id,
        attn_implementation="sdpa",
    )
    return transformers.ModernBertConfig(**{**settings, **overrides})


def modernbert_folder(path, head=None):
    """A transformers-saved ModernBERT (window 16, global every 2nd layer; ``head`` a transformers class, the
    bare encoder by default) with a BPE tokenizer, seeded; returns the transformers model."""
    import torch
    import transformers

    build_folder(path, generated_texts(1500, seed=0), vocab_size=400)
    config = tiny_modernbert_config(path)
    torch.manual_seed(0)
    model = (head or transformers.ModernBertModel)(config).eval()
    model.save_pretrained(path)
    return model
