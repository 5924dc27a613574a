"""RoBERTa checkpoints in transformers' layout load into bertkit's BERT classes (bertkit.bert_family): hidden states,
pooler and masked-LM logits equal transformers' RobertaModel / RobertaForMaskedLM, with padding, kernels on and
off; bertkit saves them back in RoBERTa's names; positions start after the padding id, so the 514-position
table holds 512 tokens; a byte-level BPE RoBERTa tokenizer gives transformers' ids."""

from __future__ import annotations

import json

import pytest
import torch

from bertkit import kernels
from bertkit.errors import UserError

transformers = pytest.importorskip("transformers")

PAD = 1  # RoBERTa's padding id (<s> 0, <pad> 1, </s> 2)
SHAPE = dict(vocab_size=300, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
             max_position_embeddings=40, type_vocab_size=1, pad_token_id=PAD, bos_token_id=0, eos_token_id=2,
             layer_norm_eps=1e-5)  # fmt: skip


def _random(cls, config, seed: int):
    """transformers' ``cls`` at a seeded initialisation, every tensor nudged (non-zero biases and LayerNorm
    scales, so a misplaced tensor shows)."""
    torch.manual_seed(seed)
    model = cls(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def _theirs(cls, seed: int):
    return _random(cls, transformers.RobertaConfig(**SHAPE), seed)


def _batch(lengths=(12, 7, 30), seed: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids [B, T] (real tokens start with <s> and end with </s>) and their attention mask."""
    gen = torch.Generator().manual_seed(seed)
    t = max(lengths)
    ids = torch.full((len(lengths), t), PAD)
    mask = torch.zeros(len(lengths), t, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(3, SHAPE["vocab_size"], (n,), generator=gen)
        ids[i, 0], ids[i, n - 1] = 0, 2
        mask[i, :n] = 1
    return ids, mask


@pytest.fixture(params=[True, False], ids=["kernels", "reference"])
def kernels_on(request):
    previous = kernels.set_enabled(request.param)
    yield request.param
    kernels.set_enabled(previous)


def test_bert_itself_is_the_member_of_bert_of_no_type_and_of_types_outside_the_family():
    from bertkit.bert_family import BERT, FAMILY, member_of
    from bertkit.config import BertConfig

    assert member_of("roberta") is FAMILY["roberta"] and member_of("distilbert").pre_classifier
    assert member_of("bert") is member_of(None) is member_of("modernbert") is BERT
    assert (BERT.classifier, BERT.offset_positions, BERT.config_keys, BERT.absent_as_zero) == (
        "pooler",
        False,
        (),
        (),
    )
    # positions: BERT counts from 0, RoBERTa after its padding id (1)
    assert (
        BertConfig(model_type="bert").position_offset == 0
        and BertConfig(model_type="roberta", pad_token_id=1).position_offset == 2
    )


def test_positions_start_after_the_padding_id():
    from bertkit.bert_family import position_ids_from_input_ids

    ids = torch.tensor([[0, 5, 6, 2, PAD, PAD], [0, 7, 2, PAD, PAD, PAD]])
    assert position_ids_from_input_ids(ids, PAD).tolist() == [[2, 3, 4, 5, 1, 1], [2, 3, 4, 1, 1, 1]]
    theirs = transformers.models.roberta.modeling_roberta.RobertaEmbeddings.create_position_ids_from_input_ids
    assert torch.equal(position_ids_from_input_ids(ids, PAD), theirs(ids, PAD))


def test_encoder_and_pooler_equal_transformers_with_padding(tmp_path, kernels_on):
    from bertkit.architectures import load_encoder

    theirs = _theirs(transformers.RobertaModel, seed=0)
    theirs.save_pretrained(tmp_path / "roberta")
    ours = load_encoder(tmp_path / "roberta").eval()
    assert ours.config.max_tokens == SHAPE["max_position_embeddings"] - PAD - 1
    ids, mask = _batch()
    with torch.no_grad():
        a, b = ours(ids, mask), theirs(input_ids=ids, attention_mask=mask)
    real = mask.bool()
    torch.testing.assert_close(a.last_hidden_state[real], b.last_hidden_state[real], atol=1e-5, rtol=1e-5)
    # the pooler reads position 0 of every row, real in each
    torch.testing.assert_close(a.pooler_output, b.pooler_output, atol=1e-5, rtol=1e-5)


def test_length_limit_is_the_tables_size_less_the_offset(tmp_path):
    from bertkit.model import BertModel

    _theirs(transformers.RobertaModel, seed=0).save_pretrained(tmp_path / "roberta")
    ours = BertModel.from_pretrained(tmp_path / "roberta")
    limit = ours.config.max_tokens
    with torch.no_grad():
        ours(torch.full((1, limit), 5))  # the longest input fits: its last position is the table's last row
    with pytest.raises(
        ValueError, match=f"sequence length {limit + 1} exceeds max_position_embeddings {limit}"
    ):
        ours(torch.full((1, limit + 1), 5))


def test_a_task_head_fine_tunes_on_the_encoder_and_ignores_segment_ids(tmp_path):
    """A RoBERTa encoder folder into the sequence head: the encoder loads, the head is RoBERTa's own
    classifier, new (the encoder's pooler is not used); segment ids of a pair (1 on the second text) do not
    index past RoBERTa's one segment type."""
    from bertkit.heads import BertForSequenceClassification

    theirs = _theirs(transformers.RobertaModel, seed=2)
    theirs.save_pretrained(tmp_path / "roberta")
    head, info = BertForSequenceClassification.from_pretrained(
        tmp_path / "roberta", output_loading_info=True, num_labels=3
    )
    assert info.missing_keys == [
        f"classifier.{m}.{p}" for m in ("dense", "out_proj") for p in ("bias", "weight")
    ]
    ids, mask = _batch(seed=5)
    segments = torch.zeros_like(ids)
    segments[:, 4:] = 1
    head.train()
    out = head(ids, mask, token_type_ids=segments, labels=torch.tensor([0, 2, 1]))
    out.loss.backward()
    assert head.bert.embeddings.word_embeddings.weight.grad is not None
    with torch.no_grad():
        head.eval()
        real = mask.bool()
        want = theirs(input_ids=ids, attention_mask=mask).last_hidden_state[real]
        got = head.bert(ids, mask, segments).last_hidden_state[real]
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_a_config_whose_offset_leaves_no_position_is_refused(tmp_path):
    from bertkit.config import BertConfig

    with pytest.raises(ValueError, match="max_position_embeddings 2 leaves no position"):
        BertConfig(model_type="roberta", pad_token_id=1, max_position_embeddings=2, vocab_size=10).validate()


def _roberta_tokenizer(out, max_length: int = 512):
    """A small byte-level BPE tokenizer in RoBERTa's form (``<s> a </s></s> b </s>``), saved in ``out``."""
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers

    rust = RustTokenizer(models.BPE())
    rust.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    rust.decoder = decoders.ByteLevel()
    text = ["the river flows to the sea", "a quick brown fox jumps over the lazy dog", "rivers and seas"] * 20
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    rust.train_from_iterator(text, trainer)
    rust.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=rust, bos_token="<s>", eos_token="</s>",
                                              sep_token="</s>", cls_token="<s>", pad_token="<pad>",
                                              unk_token="<unk>", mask_token="<mask>",
                                              model_max_length=max_length)  # fmt: skip
    hf.save_pretrained(out)
    return out


def test_a_byte_level_bpe_roberta_tokenizer_gives_transformers_ids(tmp_path):
    from bertkit.tokenizer import Tokenizer

    _roberta_tokenizer(tmp_path / "tok")
    ours = Tokenizer.from_pretrained(tmp_path / "tok")
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "tok")
    for a, b in (("the lazy river", None), ("a fox", "jumps over the sea")):
        want = theirs(a, b)["input_ids"]
        got = ours([a] if b is None else [(a, b)])["input_ids"][0]
        got = [int(i) for i in got if int(i) != ours.pad_token_id]
        assert got == want
    assert want[0] == 0 and want.count(2) == 3  # <s> a </s></s> b </s>


def test_a_roberta_folder_without_weights_for_bert_is_refused_in_one_line(tmp_path):
    from bertkit.model import BertModel

    _theirs(transformers.RobertaModel, seed=0).save_pretrained(tmp_path / "roberta")
    from safetensors.torch import save_file

    save_file({"something.else": torch.zeros(2)}, str(tmp_path / "roberta" / "model.safetensors"))
    with pytest.raises(UserError, match="hold none of BertModel's tensors"):
        BertModel.from_pretrained(tmp_path / "roberta")


def test_a_sentence_transformers_folder_on_roberta_embeds_as_sentence_transformers(tmp_path):
    """The many sentence-transformers models whose first module is RoBERTa: bertkit's SentenceEncoder reads
    the folder and gives sentence-transformers' embeddings."""
    st = pytest.importorskip("sentence_transformers")
    try:  # the newer home of the modules, else the older one
        from sentence_transformers.sentence_transformer import modules as st_models
    except ImportError:
        from sentence_transformers import models as st_models

    from bertkit.sentence.encoder import SentenceEncoder

    limit = SHAPE["max_position_embeddings"] - PAD - 1
    _theirs(transformers.RobertaModel, seed=6).save_pretrained(tmp_path / "tf")
    _roberta_tokenizer(tmp_path / "tf", max_length=limit)
    theirs = st.SentenceTransformer(
        modules=[
            st_models.Transformer(str(tmp_path / "tf")),
            st_models.Pooling(SHAPE["hidden_size"], "mean"),
        ],
        device="cpu",
    )
    theirs.save(str(tmp_path / "st"))
    sentences = ["the lazy river", "a fox jumps over the sea and the river flows to the sea " * 3]
    ours = SentenceEncoder.from_pretrained(tmp_path / "st").encode(sentences)
    want = theirs.encode(sentences)
    assert abs(ours - want).max() < 1e-5  # the long one is cut at the same 38 tokens on both sides


def test_a_fine_tuned_head_saves_in_robertas_names_and_reloads_whole(tmp_path):
    """bertkit's head on a RoBERTa encoder, saved: the encoder under ``roberta.*`` (transformers' RobertaModel
    reads it) and the head's own tensors as bertkit names them; bertkit reloads every tensor; model cards
    call it RoBERTa."""
    from bertkit.architectures import display_name
    from bertkit.heads import BertForSequenceClassification

    _theirs(transformers.RobertaModel, seed=7).save_pretrained(tmp_path / "roberta")
    head = BertForSequenceClassification.from_pretrained(tmp_path / "roberta", num_labels=2)
    head.save_pretrained(tmp_path / "tuned")
    assert display_name(tmp_path / "tuned") == "RoBERTa"
    again, info = BertForSequenceClassification.from_pretrained(tmp_path / "tuned", output_loading_info=True)
    assert info.missing_keys == [] and info.unexpected_keys == []
    ids, mask = _batch(seed=8)
    with torch.no_grad():
        torch.testing.assert_close(again(ids, mask).logits, head(ids, mask).logits)
        encoder = transformers.RobertaModel.from_pretrained(tmp_path / "tuned").eval()
        real = mask.bool()
        want = encoder(input_ids=ids, attention_mask=mask).last_hidden_state[real]
        torch.testing.assert_close(head.bert(ids, mask).last_hidden_state[real], want, atol=1e-5, rtol=1e-5)


def test_onnx_export_of_a_roberta_encoder_has_no_segment_input_and_verifies(tmp_path):
    pytest.importorskip("onnxruntime")
    from bertkit.export import export_onnx

    _theirs(transformers.RobertaModel, seed=9).save_pretrained(tmp_path / "roberta")
    result = export_onnx(tmp_path / "roberta", tmp_path / "m.onnx")
    assert result["inputs"] == ["input_ids", "attention_mask"]
    assert max(result["verify"]["max_abs_diff"].values()) < 1e-4


# ---------------------------------------------------------------------------------------------------- ELECTRA

ELECTRA_SHAPE = dict(vocab_size=300, embedding_size=32, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=40, layer_norm_eps=1e-12)  # fmt: skip


def _electra(cls, seed: int, **more):
    return _random(cls, transformers.ElectraConfig(**{**ELECTRA_SHAPE, **more}), seed)


def _bert_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ids [3, 30] padded with 0, their mask, and segment ids (1 on the second half of each real row)."""
    ids, mask = _batch(seed=seed)
    ids = ids.masked_fill(~mask.bool(), 0)
    segments = torch.zeros_like(ids)
    segments[:, 5:] = 1
    return ids, mask, segments * mask


def test_an_electra_discriminator_with_narrow_embeddings_equals_transformers(tmp_path, kernels_on):
    """ELECTRA-small's shape (embeddings 32 wide mapped up to 64): the encoder's hidden states equal
    transformers' ElectraModel with padding and segments; the pooler, which ELECTRA lacks, is the one tensor
    left fresh, and the discriminator's head is the one left out."""
    from bertkit.architectures import load_encoder
    from bertkit.model import BertModel

    theirs = _electra(transformers.ElectraForPreTraining, seed=0)
    theirs.save_pretrained(tmp_path / "disc")
    ours, info = BertModel.from_pretrained(tmp_path / "disc", output_loading_info=True)
    assert info.missing_keys == ["pooler.dense.bias", "pooler.dense.weight"]
    assert info.unexpected_keys and all(
        k.startswith("discriminator_predictions.") for k in info.unexpected_keys
    )
    assert ours.embeddings.word_embeddings.weight.shape == (300, 32) and ours.embeddings_project is not None
    ids, mask, segments = _bert_batch(seed=6)
    real = mask.bool()
    with torch.no_grad():
        got = load_encoder(tmp_path / "disc")(ids, mask, segments).last_hidden_state
        want = theirs.electra(input_ids=ids, attention_mask=mask, token_type_ids=segments).last_hidden_state
    torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=1e-5)


def test_a_head_fine_tuned_on_electra_saves_under_electras_names(tmp_path):
    from safetensors import safe_open

    from bertkit.heads import BertForTokenClassification

    theirs = _electra(transformers.ElectraModel, seed=2)
    theirs.save_pretrained(tmp_path / "electra")
    head = BertForTokenClassification.from_pretrained(tmp_path / "electra", num_labels=5)
    head.save_pretrained(tmp_path / "tuned")
    with safe_open(str(tmp_path / "tuned" / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert "electra.embeddings_project.weight" in names and not any(n.startswith("bert.") for n in names)
    encoder = transformers.ElectraModel.from_pretrained(tmp_path / "tuned").eval()
    ids, mask, segments = _bert_batch(seed=8)
    real = mask.bool()
    with torch.no_grad():
        want = encoder(input_ids=ids, attention_mask=mask, token_type_ids=segments).last_hidden_state[real]
        got = head.eval().bert(ids, mask, segments).last_hidden_state[real]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_embedding_size_is_written_only_where_it_is_set_and_must_be_positive():
    from bertkit.config import BertConfig

    assert "embedding_size" not in BertConfig.preset("tiny").to_dict()  # BERT's config.json as before
    narrow = BertConfig.preset("tiny", embedding_size=64)
    assert narrow.to_dict()["embedding_size"] == 64 and narrow.embedding_width == 64
    with pytest.raises(ValueError, match="embedding_size must be a positive integer or null, got 0"):
        BertConfig.preset("tiny", embedding_size=0).validate()


# ----------------------------------------------------------------------------------------------- XLM-RoBERTa


def _unigram_tokenizer(out):
    """A small SentencePiece-style Unigram tokenizer in XLM-RoBERTa's form (``<s> a </s></s> b </s>``)."""
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

    rust = RustTokenizer(models.Unigram())
    rust.normalizer = normalizers.NFKC()
    rust.pre_tokenizer = pre_tokenizers.Metaspace()
    rust.decoder = decoders.Metaspace()
    text = [
        "der Fluss fließt ins Meer",
        "le renard saute par-dessus le chien",
        "the river flows to the sea",
    ] * 20
    trainer = trainers.UnigramTrainer(vocab_size=120, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                      unk_token="<unk>")  # fmt: skip
    rust.train_from_iterator(text, trainer)
    rust.post_processor = processors.RobertaProcessing(
        ("</s>", 2), ("<s>", 0), add_prefix_space=False, trim_offsets=False
    )
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=rust, bos_token="<s>", eos_token="</s>",
                                              sep_token="</s>", cls_token="<s>", pad_token="<pad>",
                                              unk_token="<unk>", mask_token="<mask>")  # fmt: skip
    hf.save_pretrained(out)
    return out


def test_an_xlm_roberta_folder_and_its_unigram_tokenizer_equal_transformers(tmp_path, kernels_on):
    from bertkit.architectures import load_encoder
    from bertkit.tokenizer import Tokenizer

    theirs = _random(transformers.XLMRobertaModel, transformers.XLMRobertaConfig(**SHAPE), seed=0)
    theirs.save_pretrained(tmp_path / "xlmr")
    _unigram_tokenizer(tmp_path / "xlmr")
    texts = [("der Fluss", "fließt ins Meer"), ("le renard saute", "the sea"), ("the river", "flows")]
    ours_tok = Tokenizer.from_pretrained(tmp_path / "xlmr")
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "xlmr")
    enc = ours_tok(texts, padding=True, return_tensors="pt")
    want = hf_tok([a for a, _ in texts], [b for _, b in texts], padding=True, return_tensors="pt")
    assert enc["input_ids"].tolist() == want["input_ids"].tolist()
    ours = load_encoder(tmp_path / "xlmr")
    assert ours.config.position_offset == PAD + 1
    with torch.no_grad():
        a = ours(enc["input_ids"], enc["attention_mask"]).last_hidden_state
        b = theirs(input_ids=want["input_ids"], attention_mask=want["attention_mask"]).last_hidden_state
    real = want["attention_mask"].bool()
    torch.testing.assert_close(a[real], b[real], atol=1e-5, rtol=1e-5)


def test_a_tokenizer_json_of_another_model_kind_is_refused_in_one_line(tmp_path):
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import models

    from bertkit.tokenizer import Tokenizer

    RustTokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]")).save(
        str(tmp_path / "tokenizer.json")
    )
    with pytest.raises(
        UserError, match="not a WordPiece, BPE or Unigram tokenizer \\(model type 'WordLevel'\\)"
    ):
        Tokenizer.from_pretrained(tmp_path / "tokenizer.json")


# ------------------------------------------------------------------------------------------------ DistilBERT

DISTIL_SHAPE = dict(vocab_size=300, dim=64, n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=40)


def _distil(cls, seed: int):
    return _random(cls, transformers.DistilBertConfig(**DISTIL_SHAPE), seed)


def test_a_distilbert_encoder_equals_transformers_and_has_no_segments(tmp_path, kernels_on):
    """DistilBERT's own names for BERT's layers and sizes: the encoder's hidden states equal transformers'
    DistilBertModel with padding; its absent segment embeddings are zero, so segment ids change nothing."""
    from bertkit.model import BertModel

    theirs = _distil(transformers.DistilBertModel, seed=0)
    theirs.save_pretrained(tmp_path / "distil")
    ours, info = BertModel.from_pretrained(tmp_path / "distil", output_loading_info=True)
    assert info.missing_keys == ["pooler.dense.bias", "pooler.dense.weight"] and info.unexpected_keys == []
    assert (ours.config.hidden_size, ours.config.num_hidden_layers, ours.config.intermediate_size) == (
        64,
        2,
        128,
    )
    assert not ours.embeddings.token_type_embeddings.weight.any()
    ids, mask, segments = _bert_batch(seed=9)
    real = mask.bool()
    with torch.no_grad():
        got = ours(ids, mask, segments).last_hidden_state
        want = theirs(input_ids=ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------- masked LMs, both ways

# member -> (transformers' masked LM at a seeded init, its batch: ids, mask, segments or None)
MLM_CASES = {
    "roberta": (lambda: _theirs(transformers.RobertaForMaskedLM, seed=1), lambda: (*_batch(seed=4), None)),
    "electra": (  # a generator narrower than its embeddings' projection, with segments
        lambda: _electra(transformers.ElectraForMaskedLM, seed=1, hidden_size=48, num_attention_heads=3),
        lambda: _bert_batch(seed=7),
    ),
    "distilbert": (
        lambda: _distil(transformers.DistilBertForMaskedLM, seed=1),
        lambda: (*_bert_batch(10)[:2], None),
    ),
}


@pytest.mark.parametrize("member", list(MLM_CASES))
def test_a_family_masked_lm_fills_masks_as_transformers_and_saves_back(tmp_path, kernels_on, member):
    """A member's masked LM loads whole and its logits equal transformers' with padding; bertkit saves it back
    under the member's own tensor names, config keys and class, which transformers reads whole to the same
    logits."""
    import json

    from safetensors import safe_open

    from bertkit.heads import BertForMaskedLM

    build, batch = MLM_CASES[member]
    theirs = build()
    theirs.save_pretrained(tmp_path / "theirs")
    ours, info = BertForMaskedLM.from_pretrained(tmp_path / "theirs", output_loading_info=True)
    assert info.missing_keys == [] and info.unexpected_keys == []
    ids, mask, segments = batch()
    given = {"input_ids": ids, "attention_mask": mask}
    if segments is not None:
        given["token_type_ids"] = segments
    real = mask.bool()
    with torch.no_grad():
        want = theirs(**given).logits[real]
        torch.testing.assert_close(
            ours(ids, mask, segments, sparse_mlm=False).logits[real], want, atol=1e-4, rtol=1e-5
        )
    ours.save_pretrained(tmp_path / "ours")

    def tensor_names(folder):
        with safe_open(str(folder / "model.safetensors"), "pt") as f:
            return set(f.keys())

    assert tensor_names(tmp_path / "ours") == tensor_names(tmp_path / "theirs")
    config = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert config["model_type"] == member and config["architectures"] == [type(theirs).__name__]
    assert set(json.loads((tmp_path / "theirs" / "config.json").read_text())) <= set(config)
    back, loading = type(theirs).from_pretrained(tmp_path / "ours", output_loading_info=True)
    assert not loading["missing_keys"] and not loading["unexpected_keys"]
    with torch.no_grad():
        torch.testing.assert_close(back.eval()(**given).logits[real], want, atol=1e-4, rtol=1e-5)


# ------------------------------------------------------------------- the family's own sequence classifiers


@pytest.mark.parametrize("family", ["roberta", "xlm-roberta", "camembert", "electra", "distilbert"])
def test_a_sequence_classifier_fine_tuned_by_transformers_loads_whole_and_goes_back(
    tmp_path, family, kernels_on
):
    """transformers' XForSequenceClassification (sentiment models, NLI, rerankers): bertkit's sequence head
    loads every tensor, gives its logits with padding, saves a folder transformers' AutoModel reads back
    whole, and the server and ``predict`` take the transformers-saved folder as a sequence classifier."""
    from bertkit.architectures import model_class
    from bertkit.heads import BertForSequenceClassification

    configs = {
        "roberta": (transformers.RobertaForSequenceClassification, transformers.RobertaConfig(**SHAPE)),
        "xlm-roberta": (transformers.XLMRobertaForSequenceClassification, transformers.XLMRobertaConfig(**SHAPE)),
        "camembert": (transformers.CamembertForSequenceClassification, transformers.CamembertConfig(**SHAPE)),
        "electra": (transformers.ElectraForSequenceClassification, transformers.ElectraConfig(**ELECTRA_SHAPE)),
        "distilbert": (transformers.DistilBertForSequenceClassification, transformers.DistilBertConfig(**DISTIL_SHAPE)),
    }  # fmt: skip
    cls, config = configs[family]
    config.num_labels = 3
    theirs = _random(cls, config, seed=11)
    theirs.save_pretrained(tmp_path / "theirs")
    arch = json.loads((tmp_path / "theirs" / "config.json").read_text())["architectures"][0]
    assert model_class(arch, tmp_path / "theirs") is BertForSequenceClassification
    ours, info = BertForSequenceClassification.from_pretrained(tmp_path / "theirs", output_loading_info=True)
    assert info.missing_keys == [] and info.unexpected_keys == []
    pad = config.pad_token_id
    ids, mask = _batch(seed=12)
    ids = ids.masked_fill(~mask.bool(), pad)
    with torch.no_grad():
        want = theirs(input_ids=ids, attention_mask=mask).logits
        torch.testing.assert_close(ours(ids, mask).logits, want, atol=1e-5, rtol=1e-5)
    ours.save_pretrained(tmp_path / "ours")
    saved = json.loads((tmp_path / "ours" / "config.json").read_text())["architectures"]
    assert (
        saved == [cls.__name__] and model_class(saved[0], tmp_path / "ours") is BertForSequenceClassification
    )
    back, loading = transformers.AutoModelForSequenceClassification.from_pretrained(
        tmp_path / "ours", output_loading_info=True
    )
    assert type(back) is cls and not loading["missing_keys"] and not loading["unexpected_keys"]
    with torch.no_grad():
        torch.testing.assert_close(
            back.eval()(input_ids=ids, attention_mask=mask).logits, want, atol=1e-5, rtol=1e-5
        )


def test_a_roberta_reranker_scores_pairs_in_robertas_layout_over_http(tmp_path):
    """A one-output RobertaForSequenceClassification (a reranker such as bge-reranker is one, on XLM-RoBERTa)
    served: /rerank builds each (query, text) in the tokenizer's own ``<s> q </s></s> t </s>``, so its raw
    scores equal transformers' logits on the tokenizer's pair encoding, also when the pair is cut short."""
    from fastapi.testclient import TestClient

    from bertkit.serving.app import create_app

    config = transformers.RobertaConfig(**SHAPE)
    config.num_labels = 1
    theirs = _random(transformers.RobertaForSequenceClassification, config, seed=13)
    theirs.save_pretrained(tmp_path / "reranker")
    _roberta_tokenizer(tmp_path / "reranker", max_length=16)
    texts = ["the sea flows", "a fox jumps over the lazy dog and the river flows to the sea"]
    client = TestClient(create_app(str(tmp_path / "reranker"), precision="fp32", max_length=16))
    got = client.post(
        "/rerank", json={"query": "the river", "texts": texts, "raw_scores": True, "truncate": True}
    )
    assert got.status_code == 200
    scores = {r["index"]: r["score"] for r in got.json()}
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "reranker")
    enc = tok(["the river"] * 2, texts, padding=True, truncation=True, max_length=16, return_tensors="pt")
    assert enc["attention_mask"][1].sum() == 16  # the long pair was cut
    with torch.no_grad():
        want = theirs.eval()(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits[:, 0]
    assert [scores[0], scores[1]] == pytest.approx(want.tolist(), abs=1e-5)


def test_glue_pairs_are_encoded_in_robertas_layout_as_transformers_does(tmp_path):
    """Fine-tuning's pair encoding (GLUE, classify, SWAG) follows the tokenizer: RoBERTa's
    ``<s> a </s></s> b </s>``, cut longest-first to the limit, equal to transformers' ids; single texts and a
    WordPiece tokenizer keep BERT's ``[CLS] a [SEP] b [SEP]``."""
    from bertkit.tasks.encoding import encode_pairs
    from bertkit.tokenizer import Tokenizer

    _roberta_tokenizer(tmp_path / "tok")
    ours, theirs = (
        Tokenizer.from_pretrained(tmp_path / "tok"),
        transformers.AutoTokenizer.from_pretrained(tmp_path / "tok"),
    )
    a = ["the river flows", "a quick brown fox jumps over the lazy dog", "rivers"]
    b = ["to the sea", "the sea", None]
    got = encode_pairs(ours, a, b, max_seq_length=12)
    for (ids, _types), x, y in zip(got, a, b):
        assert ids == theirs(x, y, truncation="longest_first", max_length=12)["input_ids"]
    assert got[0][0].count(2) == 3 and len(got[1][0]) == 12  # </s></s> between; the long pair cut


def test_onnx_export_of_a_fine_tuned_family_classifier_exports_its_head(tmp_path):
    """A folder saved as RobertaForSequenceClassification exports the classifier's logits, not the bare
    encoder."""
    pytest.importorskip("onnxruntime")
    from bertkit.export import export_onnx

    config = transformers.RobertaConfig(**SHAPE)
    config.num_labels = 2
    _random(transformers.RobertaForSequenceClassification, config, seed=14).save_pretrained(tmp_path / "clf")
    result = export_onnx(tmp_path / "clf", tmp_path / "clf.onnx")
    assert list(result["verify"]["max_abs_diff"]) == ["logits"]
    assert result["verify"]["max_abs_diff"]["logits"] < 1e-4


def test_a_model_type_bertkit_does_not_run_is_refused_in_one_line_naming_the_file(tmp_path, capsys):
    """An MPNet or DeBERTa folder is not BERT under other names: refused before any weight is read, naming the
    file and the model types bertkit runs (CLI: exit 2, one line)."""
    from bertkit.architectures import load_config
    from bertkit.cli import main

    (tmp_path / "mpnet").mkdir()
    (tmp_path / "mpnet" / "config.json").write_text(json.dumps({"model_type": "mpnet", "hidden_size": 64}))
    with pytest.raises(
        UserError, match=r"mpnet/config.json: model_type 'mpnet' is not an architecture bertkit runs"
    ):
        load_config(tmp_path / "mpnet")
    assert main(["info", str(tmp_path / "mpnet")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "roberta, xlm-roberta, camembert, electra, distilbert and modernbert" in err[0]


@pytest.mark.parametrize(
    "cls, config, name",
    [("ElectraModel", "ElectraConfig", "ELECTRA"), ("DistilBertModel", "DistilBertConfig", "DistilBERT"),
     ("CamembertModel", "CamembertConfig", "CamemBERT")],
)  # fmt: skip
def test_model_cards_name_each_family_member(tmp_path, cls, config, name):
    from bertkit.architectures import display_name

    shape = {"electra": ELECTRA_SHAPE, "distilbert": DISTIL_SHAPE}.get(
        getattr(transformers, config).model_type, SHAPE
    )
    _random(getattr(transformers, cls), getattr(transformers, config)(**shape), seed=0).save_pretrained(
        tmp_path
    )
    assert display_name(tmp_path) == name


def test_predict_scores_pairs_with_a_one_output_classifier_transformers_saved(tmp_path):
    """``bertkit predict`` on a reranker transformers saved (one output, no problem_type): each pair's raw
    score, equal to transformers' logit on the tokenizer's own pair encoding (it printed label 0, prob 1)."""
    from bertkit.cli import main

    config = transformers.RobertaConfig(**SHAPE)
    config.num_labels = 1
    theirs = _random(transformers.RobertaForSequenceClassification, config, seed=15)
    theirs.save_pretrained(tmp_path / "reranker")
    _roberta_tokenizer(tmp_path / "reranker")
    rows = [{"text": "the river", "pair": "flows to the sea"}, {"text": "a fox", "pair": "jumps"}]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["predict", str(tmp_path / "reranker"), "--input", str(tmp_path / "in.jsonl"),
            "--out", str(tmp_path / "out.jsonl"), "--pair-field", "pair"]  # fmt: skip
    assert main(argv) == 0
    got = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "reranker")
    for row, r in zip(got, rows):
        with torch.no_grad():
            want = theirs.eval()(**tok(r["text"], r["pair"], return_tensors="pt")).logits[0, 0]
        assert row["text_pair"] == r["pair"] and row["score"] == pytest.approx(float(want), abs=1e-5)
