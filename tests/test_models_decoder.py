"""luminal.models decoders (issue 16, item 4): GPT-2 and Llama with a KV cache carried between executes.

Oracles: ``transformers.GPT2LMHeadModel`` / ``LlamaForCausalLM`` built from small configs (2 layers, hidden 64,
4 heads, 2 key/value heads for Llama: grouped-query attention; vocabulary 100) with ``torch.manual_seed``-fixed
random weights drawn at the scale of a trained model (so every layer and the attention pattern matter: logits of
order 1), saved with ``save_pretrained(safe_serialization=True)`` in float32 and bfloat16 and loaded with
``DecoderLM.from_pretrained``. Compared: full-forward logits (within 1e-4), greedy generation token for token
against ``generate(do_sample=False)``, each cached step against a full recomputation without a cache (luminal's
and transformers'), and transformers' own ``TopKLogitsWarper`` / ``TopPLogitsWarper`` for the sampling filters.
"""

import numpy as np
import pytest
import torch
import transformers

import luminal as lm
import luminal.runtime
from luminal.models import (DecoderConfig, DecoderLM, GPT2LMHeadModel, KVCache, LlamaForCausalLM,
                            MissingWeightError, ModelConfigError, sample_next,
                            sampling_distribution)

TOL = 1e-4
VOCAB = 100
MAX_POS = 48
GPT2 = dict(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=MAX_POS, bos_token_id=None,
            eos_token_id=None)
LLAMA = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=96, max_position_embeddings=MAX_POS, bos_token_id=None, eos_token_id=None)


def random_hf(kind, seed=0):
    """A transformers decoder from a tiny config, weights drawn at a trained model's scale."""
    torch.manual_seed(seed)
    if kind == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**GPT2)).eval()
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA)).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                norm = any(s in name for s in ("ln_", "norm"))
                p.copy_((1 if norm else 0) + 0.1 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[0] if (kind == "gpt2" and "wte" not in name and "wpe" not in name) else p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)
    return model


def hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.from_numpy(np.asarray(ids, np.int64)), use_cache=False).logits.numpy()


def hf_greedy(model, ids, n):
    with torch.no_grad():
        return model.generate(torch.from_numpy(np.asarray(ids, np.int64)), max_new_tokens=n, do_sample=False,
                              pad_token_id=0).numpy()


def prompt(batch, seq, seed=0):
    return np.random.default_rng(seed).integers(1, VOCAB, (batch, seq))


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """{kind: (luminal model, transformers model)} for gpt2 and llama, float32 safetensors folders."""
    root = tmp_path_factory.mktemp("decoders")
    out = {}
    for kind in ("gpt2", "llama"):
        hf = random_hf(kind)
        folder = root / kind
        hf.save_pretrained(folder, safe_serialization=True)
        assert (folder / "model.safetensors").is_file()
        out[kind] = (DecoderLM.from_pretrained(folder), hf, folder)
    return out


KINDS = ["gpt2", "llama"]


@pytest.mark.parametrize("device", ["cpu", "reference"])
@pytest.mark.parametrize("kind", KINDS)
def test_full_forward_logits_match_transformers(zoo, kind, device):
    model, hf, _ = zoo[kind]
    assert isinstance(model, GPT2LMHeadModel if kind == "gpt2" else LlamaForCausalLM)
    ids = prompt(2, 9)
    got = model.logits(ids, device=device)
    ref = hf_logits(hf, ids)
    assert got.shape == (2, 9, VOCAB)
    assert np.abs(ref).max() > 1.0  # logits of order 1: the comparison is not trivially small
    np.testing.assert_allclose(got, ref, atol=TOL, rtol=0)
    one = model.logits(ids[1], device=device)  # 1-D ids: (seq, vocab)
    np.testing.assert_allclose(one, ref[1], atol=TOL, rtol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_generation_matches_transformers(zoo, kind):
    model, hf, _ = zoo[kind]
    ids = prompt(1, 6, seed=3)
    ref = hf_greedy(hf, ids, 16)
    got = model.generate(ids[0], 16)
    assert got.dtype == np.int64 and got.shape == (22,)
    np.testing.assert_array_equal(got, ref[0])
    streamed = model.generate(ids[0], 16, stream=True)
    assert not isinstance(streamed, np.ndarray)
    tokens = []
    for t in streamed:
        assert isinstance(t, int)
        tokens.append(t)
    assert tokens == ref[0, 6:].tolist()
    batch = prompt(2, 5, seed=4)  # equally long prompts, no padding
    np.testing.assert_array_equal(model.generate(batch, 16), hf_greedy(hf, batch, 16))


@pytest.mark.parametrize("device,bucket", [("cpu", 1), ("cpu", 4), ("reference", 64)])
@pytest.mark.parametrize("kind", KINDS)
def test_cached_steps_equal_full_recomputation(zoo, kind, device, bucket):
    """Prompt step then one- and two-token steps with the cache; ``bucket=1`` keeps the ``past`` symbol equal to
    the cached length at every step, ``bucket=4`` grows the cache every few steps (valid < capacity between)."""
    model, hf, _ = zoo[kind]
    cfg = model.config
    prog, full = model.program(device), model.program(device, all_logits=True)
    seq = prompt(2, 5, seed=7)
    cache = KVCache.empty(cfg, 2, bucket=bucket)
    rng = np.random.default_rng(11)
    step_ids = seq
    capacities = set()
    for step in range(6 if device == "cpu" else 3):
        logits, cache = prog.step(step_ids, cache)
        capacities.add(cache.capacity)
        assert logits.shape == (2, 1, VOCAB)
        assert cache.length == seq.shape[1] and cache.capacity % bucket == 0 and cache.capacity >= cache.length
        if bucket == 1:
            assert cache.capacity == cache.length
        assert all(k.shape == (2, cfg.num_kv_heads, cache.capacity, cfg.head_dim) for k in cache.keys + cache.values)
        # without a cache: luminal's full forward and transformers' (use_cache=False)
        no_cache, _ = full.step(seq, KVCache.empty(cfg, 2))
        np.testing.assert_allclose(logits[:, 0], no_cache[:, -1], atol=TOL, rtol=0)
        np.testing.assert_allclose(logits[:, 0], hf_logits(hf, seq)[:, -1], atol=TOL, rtol=0)
        step_ids = rng.integers(0, VOCAB, (2, 1 if step % 2 == 0 else 2))  # one- and two-token steps
        seq = np.concatenate([seq, step_ids], axis=1)
    if bucket == 4:
        assert capacities == {8, 12}  # grown once, valid < capacity in between


def test_cache_equals_transformers_past_key_values(zoo):
    """The carried cache holds what transformers' DynamicCache holds (keys after RoPE, grouped heads)."""
    model, hf, _ = zoo["llama"]
    ids = prompt(1, 7, seed=5)
    _, cache = model.program("cpu").step(ids, KVCache.empty(model.config, 1))
    _, cache = model.program("cpu").step(ids[:, :2], cache)  # two more positions, after the seven
    with torch.no_grad():
        past = hf(torch.from_numpy(np.concatenate([ids, ids[:, :2]], 1)), use_cache=True).past_key_values
    keys, values = cache.valid()
    assert cache.capacity == 64 and cache.length == 9
    for i in range(model.config.num_layers):
        layer = past.layers[i]
        np.testing.assert_allclose(keys[i], layer.keys.numpy(), atol=TOL, rtol=0)
        np.testing.assert_allclose(values[i], layer.values.numpy(), atol=TOL, rtol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_one_compile_serves_every_step(kind, monkeypatch):
    """A fresh model: the prompt step and every one-token step run on one compiled program (one runtime
    attach, the same runtime object, no rebuild), whatever the prompt length."""
    cfg = GPT2 if kind == "gpt2" else LLAMA
    model = DecoderLM.from_config({**cfg, "model_type": kind}, seed=1)
    real_attach = luminal.runtime.attach
    attaches = []

    def counting_attach(graph, device, *args, **kwargs):
        attaches.append(device)
        return real_attach(graph, device, *args, **kwargs)

    monkeypatch.setattr(luminal.runtime, "attach", counting_attach)
    out = model.generate(prompt(1, 4)[0], 12)
    prog = model.program("cpu")
    runtime = prog.graph.runtime
    assert runtime is not None and attaches == ["cpu"] and prog.compiles == 1
    out2 = list(model.generate(prompt(3, 9)[0:2], 10, do_sample=True, top_k=5, seed=0, stream=True))
    assert out.shape == (16,) and len(out2) == 10 and out2[0].shape == (2,)
    assert attaches == ["cpu"] and prog.graph.runtime is runtime and not runtime.stale(prog.graph)
    assert list(model._programs) == [("cpu", False, None)]


def bf16_rounded(model):
    """``model`` with every parameter rounded to bfloat16 (kept in float32)."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    return model


def test_bf16_safetensors_load(zoo, tmp_path):
    _, hf, _ = zoo["llama"]
    bf = random_hf("llama").to(torch.bfloat16)
    bf.save_pretrained(tmp_path, safe_serialization=True)
    from luminal.io import safetensors_header
    dtypes = {dt for dt, _ in safetensors_header(str(tmp_path / "model.safetensors")).values()}
    assert dtypes == {"BF16"}
    model = DecoderLM.from_pretrained(tmp_path)
    oracle = bf16_rounded(random_hf("llama"))  # computed in float32 as luminal does (RoPE buffers kept float32)
    ids = prompt(2, 8, seed=9)
    np.testing.assert_allclose(model.logits(ids), hf_logits(oracle, ids), atol=TOL, rtol=0)
    assert np.abs(hf_logits(oracle, ids) - hf_logits(hf, ids)).max() > 1e-3  # the rounding is visible
    np.testing.assert_array_equal(model.generate(ids[:1], 8), hf_greedy(oracle, ids[:1], 8))


@pytest.mark.parametrize("kind", KINDS)
def test_bf16_weights_stay_bf16(tmp_path, kind):
    """``weight_dtype="bfloat16"`` keeps the parameters in bfloat16 (the matrix products read them as stored, no
    float32 copy) and computes in float32: logits and greedy tokens equal transformers' float32 model with
    bfloat16-rounded weights."""
    from luminal.codegen.gemm_lowp import operand_stores
    from luminal.codegen.kernel import GemmKernel

    random_hf(kind).to(torch.bfloat16).save_pretrained(tmp_path, safe_serialization=True)
    model = DecoderLM.from_pretrained(tmp_path, weight_dtype="bfloat16")
    assert {p.dtype for _, p in model.named_parameters()} == {lm.bfloat16}
    oracle = bf16_rounded(random_hf(kind))
    ids = prompt(2, 8, seed=9)
    np.testing.assert_allclose(model.logits(ids), hf_logits(oracle, ids), atol=TOL, rtol=0)
    np.testing.assert_array_equal(model.generate(ids[:1], 8), hf_greedy(oracle, ids[:1], 8))
    prog = model.program("cpu").graph.runtime.program
    stored = [operand_stores(prog, k) for k in prog.kernels if isinstance(k, GemmKernel)]
    assert stored.count(("float32", "bfloat16")) >= 4 * model.config.num_layers + 1  # projections and the head
    with pytest.raises(RuntimeError, match="already used by a graph"):
        model.to("float32")


def test_gpt2_bf16_and_untied_prefixless_checkpoint(tmp_path):
    """A GPT2Model checkpoint (no ``transformer.`` prefix, no head) in bf16 loads with the head tied."""
    hf = random_hf("gpt2")
    hf.transformer.to(torch.bfloat16).save_pretrained(tmp_path, safe_serialization=True)
    model = DecoderLM.from_pretrained(tmp_path)
    oracle = bf16_rounded(random_hf("gpt2"))
    ids = prompt(1, 6, seed=2)
    np.testing.assert_allclose(model.logits(ids), hf_logits(oracle, ids), atol=TOL, rtol=0)


def test_sampling_is_seeded_and_filters_match_transformers(zoo):
    model, _, _ = zoo["gpt2"]
    ids = prompt(1, 5, seed=1)[0]
    a = model.generate(ids, 10, do_sample=True, temperature=0.8, top_k=20, top_p=0.9, seed=123)
    b = model.generate(ids, 10, do_sample=True, temperature=0.8, top_k=20, top_p=0.9,
                       seed=np.random.default_rng(123))
    np.testing.assert_array_equal(a, b)
    greedy = model.generate(ids, 10)
    np.testing.assert_array_equal(model.generate(ids, 10, do_sample=True, top_k=1, seed=5), greedy)
    np.testing.assert_array_equal(model.generate(ids, 10, do_sample=True, top_p=1e-6, seed=5), greedy)

    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, (6, 50)).astype(np.float32)
    logits[0, 7] = logits[0, 3]  # a tie
    for temperature, k, p in ((1.0, 1, None), (1.0, 3, None), (0.7, 10, None), (1.0, None, 0.3),
                              (1.3, None, 0.7), (1.0, None, 0.95), (0.8, 20, 0.9), (1.0, 50, 1.0)):
        warpers = [transformers.TemperatureLogitsWarper(temperature)]
        warpers += [transformers.TopKLogitsWarper(k)] if k else []
        warpers += [transformers.TopPLogitsWarper(p)] if p else []
        scores = torch.from_numpy(logits.copy())
        for w in warpers:
            scores = w(None, scores)
        want = torch.softmax(scores.double(), -1).numpy()
        got = sampling_distribution(logits, temperature, k, p)
        np.testing.assert_array_equal(got > 0, want > 0)
        np.testing.assert_allclose(got, want, atol=1e-6)
        draws = np.stack([sample_next(logits, True, temperature, k, p, rng) for _ in range(50)], 1)
        assert all((want[r, draws[r]] > 0).all() for r in range(6))
    # temperature: frequencies follow softmax(logits / T)
    row = np.array([[0.0, 1.0, 2.0, 0.5]])
    draws = sample_next(np.repeat(row, 20000, 0), True, 0.5, None, None, np.random.default_rng(1))
    want = np.exp(row[0] / 0.5) / np.exp(row[0] / 0.5).sum()
    np.testing.assert_allclose(np.bincount(draws, minlength=4) / 20000, want, atol=0.015)


def test_eos_stops_generation(zoo):
    model, _, _ = zoo["llama"]
    ids = prompt(1, 6, seed=3)[0]
    greedy = model.generate(ids, 16)
    eos = int(greedy[6 + 3])
    first = 6 + int(np.flatnonzero(greedy[6:] == eos)[0])
    stopped = model.generate(ids, 16, eos_token_id=eos)
    np.testing.assert_array_equal(stopped, greedy[:first + 1])


def test_from_config_dict_and_dataclass():
    model = DecoderLM.from_config({**LLAMA, "model_type": "llama", "tie_word_embeddings": True}, seed=0)
    assert isinstance(model, LlamaForCausalLM) and model.lm_head is None
    cfg = model.config
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.max_positions) == (4, 2, 16, MAX_POS)
    again = LlamaForCausalLM.from_config(cfg)
    assert sorted(again.state_dict()) == sorted(model.state_dict())
    out = model.generate([1, 2, 3], 4, device="reference")
    assert out.shape == (7,) and out[:3].tolist() == [1, 2, 3]
    assert model.generate([1, 2, 3], 0).tolist() == [1, 2, 3]


def test_errors(zoo, tmp_path):
    model, _, folder = zoo["gpt2"]
    with pytest.raises(ModelConfigError, match="'model_type' is 'bert'"):
        DecoderLM.from_config({"model_type": "bert", "vocab_size": 10})
    with pytest.raises(ModelConfigError, match="'model_type' is None"):
        DecoderConfig.from_dict({"vocab_size": 10})
    with pytest.raises(ModelConfigError, match="num_key_value_heads"):
        DecoderConfig.from_dict({**LLAMA, "model_type": "llama", "num_key_value_heads": 3})
    with pytest.raises(ModelConfigError, match="rope type 'linear'"):
        DecoderConfig.from_dict({**LLAMA, "model_type": "llama", "rope_scaling": {"rope_type": "linear",
                                                                                  "factor": 2.0}})
    with pytest.raises(ModelConfigError, match="'n_layer' is -1"):
        DecoderConfig.from_dict({**GPT2, "model_type": "gpt2", "n_layer": -1})
    with pytest.raises(ModelConfigError, match="GPT2LMHeadModel is a 'gpt2' model"):
        GPT2LMHeadModel.from_config({**LLAMA, "model_type": "llama"})
    # a folder whose config names an unknown architecture
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text('{"model_type": "mamba", "vocab_size": 10}')
    with pytest.raises(ModelConfigError, match="'model_type' is 'mamba'"):
        DecoderLM.from_pretrained(bad)
    with pytest.raises(FileNotFoundError, match="no config.json"):
        DecoderLM.from_pretrained(tmp_path / "bad" / ".." / "bad" / "..")
    # a missing tensor is named
    from luminal.io import load_safetensors, save_safetensors
    state = load_safetensors(str(folder / "model.safetensors"))
    state.pop("transformer.h.1.mlp.c_fc.bias")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text((folder / "config.json").read_text())
    save_safetensors(state, str(broken / "model.safetensors"))
    with pytest.raises(MissingWeightError, match=r"h\.1\.mlp\.c_fc\.bias"):
        DecoderLM.from_pretrained(broken)
    # bad inputs
    with pytest.raises(IndexError, match="token id 100 is out of range"):
        model.generate([1, 100], 2)
    with pytest.raises(IndexError, match="token id -1"):
        model.logits([[1, -1]])
    with pytest.raises(ValueError, match=f"{MAX_POS + 1} tokens; the model has {MAX_POS} positions"):
        model.generate(np.ones(MAX_POS + 1, np.int64), 1)
    with pytest.raises(ValueError, match=f"exceeds the model's {MAX_POS} positions"):
        model.generate(np.ones(MAX_POS - 4, np.int64), 5)
    with pytest.raises(ValueError, match="1-D .* or 2-D"):
        model.generate(np.ones((1, 1, 3), np.int64), 2)
    with pytest.raises(ValueError, match="integer token ids"):
        model.generate([1.5, 2.0], 2)
    with pytest.raises(ValueError, match="temperature"):
        model.generate([1, 2], 2, do_sample=True, temperature=0)
    with pytest.raises(ValueError, match="top_k"):
        model.generate([1, 2], 2, do_sample=True, top_k=0)
    with pytest.raises(ValueError, match="top_p"):
        model.generate([1, 2], 2, do_sample=True, top_p=1.5)
    with pytest.raises(ValueError, match="max_new_tokens"):
        model.generate([1, 2], -1)
    with pytest.raises(ValueError, match="device"):
        model.generate([1, 2], 2, device="tpu")
    prog = model.program("cpu")
    with pytest.raises(ValueError, match="cache holds 2 rows"):
        prog.step(np.ones((1, 2), np.int64), KVCache.empty(model.config, 2))


def test_generate_example_runs():
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, os.path.join(root, "examples", "generate.py"), "--random", "llama", "--new", "12"],
                          capture_output=True, text=True, timeout=120, cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "12 tokens in" in proc.stdout and "compiles = 1, runtime reused = True" in proc.stdout, proc.stdout
