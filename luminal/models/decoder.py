"""Decoder-only language models (GPT-2 and Llama-style) with a KV cache carried between executes.

* :class:`GPT2LMHeadModel` (``model_type: "gpt2"``): learned positions, pre-LayerNorm blocks, GELU (tanh), the
  output head tied to the token embedding.
* :class:`LlamaForCausalLM` (``model_type: "llama"``): rotary position embeddings (RoPE), RMSNorm, grouped-query
  attention, SwiGLU MLP.

Both load Hugging Face-layout folders (:meth:`DecoderLM.from_pretrained`: ``config.json`` + ``model.safetensors``
in float32 or bfloat16) or are built from a config dict (:meth:`DecoderLM.from_config`). Parameter names are
Hugging Face's (GPT-2's ``Conv1D`` weights are transposed into ``Linear`` layout when loaded).

Generation runs one graph per (model, device): :class:`DecoderProgram`. Its inputs are the new token ids
``("batch", "seq")``, the number of valid cached positions ``cache_len`` (an int64 value) and, per layer, the
key/value cache ``("batch", kv_heads, "past", head_dim)``; its outputs are the logits and this step's keys and
values ``(batch, kv_heads, seq, head_dim)``. ``past`` (the cache's length) is a symbol, so the one compiled
program serves the prompt step and every one-token step after it. Between executes the step's keys and values
are written into the cache arrays after the ``cache_len`` valid positions (:class:`KVCache`, host-side, in place)
and those same arrays are the next step's inputs. The cache grows in buckets of positions (``generate``
reserves prompt + new tokens at once), so ``past`` changes rarely and the runtime keeps its memory plan; a
bucket of 1 makes ``past`` the exact cached length at every step. Query ``i`` (absolute position
``cache_len + i``) reads the valid cached keys and the step's keys ``0 .. i`` (causal masking for a prompt step
and for decode steps alike).

Sampling (greedy, temperature, top-k, top-p) runs on the host in numpy on the last position's logits, with a
seedable ``numpy.random.Generator``. See ``docs/models.md``.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from typing import Iterator

import numpy as np

from .. import nn
from ..dtype import DType
from ..graph import Graph
from ..hl_ops import concat, where
from ..module import Module, check_graph_tensor
from ..shape import to_expr
from ._hf import MissingWeightError, ModelConfigError, load_weights, read_config

__all__ = ["DecoderConfig", "DecoderLM", "GPT2LMHeadModel", "LlamaForCausalLM", "DecoderProgram", "KVCache",
           "sample_next", "sampling_distribution", "causal_attention"]

_GPT2_ACTS = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu_fast": "tanh", "gelu": "none",
              "relu": "relu", "silu": "silu", "swish": "silu"}
_LLAMA_ACTS = ("silu", "swish")


# ---------------------------------------------------------------------------------------------- config
@dataclasses.dataclass
class DecoderConfig:
    """The architecture of a decoder, normalized from a Hugging Face ``config.json`` (:meth:`from_dict`).

    ``model_type`` is ``"gpt2"`` or ``"llama"``; ``num_kv_heads < num_heads`` is grouped-query attention
    (Llama only); ``max_positions`` bounds prompt + generated tokens (GPT-2's ``n_positions``, Llama's
    ``max_position_embeddings``)."""

    model_type: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    max_positions: int
    norm_eps: float
    activation: str = "silu"
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    scale_attn_weights: bool = True
    scale_attn_by_inverse_layer_idx: bool = False
    bos_token_id: int | None = None
    eos_token_id: int | list | None = None

    @classmethod
    def from_dict(cls, config: dict, where: str = "config") -> "DecoderConfig":
        """Validate a ``config.json`` dict (``model_type`` ``"gpt2"`` or ``"llama"``, Hugging Face key names);
        :class:`ModelConfigError` names the key and what was expected."""
        if not isinstance(config, dict):
            raise ModelConfigError(f"{where}: expected a dict (config.json's object), got {type(config).__name__}")
        model_type = config.get("model_type")
        if model_type == "gpt2":
            return cls._gpt2(config, where)
        if model_type == "llama":
            return cls._llama(config, where)
        raise ModelConfigError(f"{where}: 'model_type' is {model_type!r}; luminal.models' decoders know 'gpt2' "
                               "and 'llama' (BERT encoders: BertModel)")

    @staticmethod
    def _int(config, key, where, default=dataclasses.MISSING, minimum=1):
        if key not in config or config[key] is None:
            if default is dataclasses.MISSING:
                raise ModelConfigError(f"{where}: missing key {key!r} (expected an int >= {minimum})")
            return default
        value = config[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ModelConfigError(f"{where}: {key!r} is {value!r}; expected an int >= {minimum}")
        return value

    @staticmethod
    def _float(config, key, where, default):
        value = config.get(key, default)
        if value is None:
            value = default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ModelConfigError(f"{where}: {key!r} is {value!r}; expected a positive number")
        return float(value)

    @staticmethod
    def _token(config, key):
        value = config.get(key)
        return value if isinstance(value, (int, list)) and not isinstance(value, bool) else None

    @classmethod
    def _gpt2(cls, config, where):
        g = cls._int
        d, heads = g(config, "n_embd", where, 768), g(config, "n_head", where, 12)
        if d % heads:
            raise ModelConfigError(f"{where}: 'n_embd' ({d}) must be a multiple of 'n_head' ({heads})")
        act = config.get("activation_function", "gelu_new")
        if act not in _GPT2_ACTS:
            raise ModelConfigError(f"{where}: 'activation_function' is {act!r}; expected one of {sorted(_GPT2_ACTS)}")
        for key in ("add_cross_attention", "reorder_and_upcast_attn"):
            if config.get(key):
                raise ModelConfigError(f"{where}: {key!r} is true; expected false (not supported)")
        return cls(model_type="gpt2", vocab_size=g(config, "vocab_size", where, 50257),
                   hidden_size=d, num_layers=g(config, "n_layer", where, 12), num_heads=heads, num_kv_heads=heads,
                   head_dim=d // heads, intermediate_size=g(config, "n_inner", where, 4 * d),
                   max_positions=g(config, "n_positions", where, 1024),
                   norm_eps=cls._float(config, "layer_norm_epsilon", where, 1e-5), activation=act,
                   tie_word_embeddings=bool(config.get("tie_word_embeddings", True)), attention_bias=True,
                   mlp_bias=True, scale_attn_weights=bool(config.get("scale_attn_weights", True)),
                   scale_attn_by_inverse_layer_idx=bool(config.get("scale_attn_by_inverse_layer_idx", False)),
                   bos_token_id=cls._token(config, "bos_token_id"), eos_token_id=cls._token(config, "eos_token_id"))

    @classmethod
    def _llama(cls, config, where):
        g = cls._int
        d = g(config, "hidden_size", where, 4096)
        heads = g(config, "num_attention_heads", where, 32)
        kv = g(config, "num_key_value_heads", where, heads)
        if heads % kv:
            raise ModelConfigError(f"{where}: 'num_attention_heads' ({heads}) must be a multiple of "
                                   f"'num_key_value_heads' ({kv})")
        if "head_dim" in config and config["head_dim"] is not None:
            head_dim = g(config, "head_dim", where)
        else:
            if d % heads:
                raise ModelConfigError(f"{where}: 'hidden_size' ({d}) must be a multiple of 'num_attention_heads' "
                                       f"({heads}) when there is no 'head_dim'")
            head_dim = d // heads
        if head_dim % 2:
            raise ModelConfigError(f"{where}: the head dim ({head_dim}) must be even for rotary embeddings")
        act = config.get("hidden_act", "silu")
        if act not in _LLAMA_ACTS:
            raise ModelConfigError(f"{where}: 'hidden_act' is {act!r}; expected 'silu'")
        rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
        if not isinstance(rope, dict):
            raise ModelConfigError(f"{where}: 'rope_parameters' is {rope!r}; expected an object")
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            raise ModelConfigError(f"{where}: rope type {rope_type!r}; only 'default' rotary embeddings are "
                                   "supported (no rope scaling)")
        theta = rope.get("rope_theta", config.get("rope_theta", 10000.0))
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or theta <= 0:
            raise ModelConfigError(f"{where}: 'rope_theta' is {theta!r}; expected a positive number")
        if config.get("pretraining_tp", 1) not in (1, None):
            raise ModelConfigError(f"{where}: 'pretraining_tp' is {config['pretraining_tp']!r}; expected 1")
        if config.get("sliding_window") is not None and config.get("use_sliding_window", True):
            raise ModelConfigError(f"{where}: 'sliding_window' is set; sliding-window attention is not supported")
        return cls(model_type="llama", vocab_size=g(config, "vocab_size", where, 32000), hidden_size=d,
                   num_layers=g(config, "num_hidden_layers", where, 32), num_heads=heads, num_kv_heads=kv,
                   head_dim=head_dim, intermediate_size=g(config, "intermediate_size", where, 11008),
                   max_positions=g(config, "max_position_embeddings", where, 2048),
                   norm_eps=cls._float(config, "rms_norm_eps", where, 1e-6), activation="silu",
                   rope_theta=float(theta), tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
                   attention_bias=bool(config.get("attention_bias", False)),
                   mlp_bias=bool(config.get("mlp_bias", False)),
                   bos_token_id=cls._token(config, "bos_token_id"), eos_token_id=cls._token(config, "eos_token_id"))


# ---------------------------------------------------------------------------------------------- attention
def causal_attention(q, k, v, past, scale: float, cache_len=None):
    """Attention of ``q`` (batch, kv_heads, n_rep, seq, d) over ``k``/``v`` (batch, kv_heads, past + seq, d): the
    first ``past`` positions are the cache, of which only the first ``cache_len`` are valid (``cache_len`` a
    ``(1,)`` int tensor; None: all ``past``), the last ``seq`` are this step's, query ``i`` seeing step keys
    ``0 .. i`` (``past`` an int or a symbolic ``Expression``). Grouped-query attention is the ``n_rep`` axis: each
    key/value head serves ``n_rep`` query heads through a broadcast view (no copy of the cache)."""
    graph = q.graph
    L, S = q.dims[-2], k.dims[-2]
    rows = graph.arange(L).unsqueeze(-1).expand((L, S))
    cols = graph.arange(S).unsqueeze(0).expand((L, S))
    allowed = cols.le(rows + past)                                     # causal over the step's own keys
    if cache_len is not None:                                          # and only the valid cached positions
        allowed = allowed & (cols.ge(past) | cols.lt(cache_len.unsqueeze(0)))
    k, v = k.unsqueeze(2), v.unsqueeze(2)                              # (batch, kv_heads, 1, S, d)
    scores = (q @ k.mT) * scale                                        # (batch, kv_heads, n_rep, seq, S)
    scores = where(allowed, scores, -math.inf)
    return scores.softmax(-1) @ v                                      # (batch, kv_heads, n_rep, seq, d)


def _attend(q, k, v, past_k, past_v, cache_len, cfg: DecoderConfig, scale: float):
    """Attend over the cache and this step's keys/values; returns ``(out (batch, seq, heads * d), k, v)`` with
    this step's ``k``/``v`` as (batch, kv_heads, seq, d). ``q`` is (batch, seq, heads, d); ``k``/``v``
    (batch, seq, kv_heads, d); ``past_k``/``past_v`` (batch, kv_heads, past, d)."""
    B, L = q.dims[0], q.dims[1]
    kvh, rep, d = cfg.num_kv_heads, cfg.num_heads // cfg.num_kv_heads, cfg.head_dim
    q = q.reshape((B, L, kvh, rep, d)).permute(0, 2, 3, 1, 4)          # (batch, kv_heads, n_rep, seq, d)
    k, v = k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)                 # (batch, kv_heads, seq, d)
    all_k = concat([past_k, k], 2)                                      # (batch, kv_heads, past + seq, d)
    all_v = concat([past_v, v], 2)
    out = causal_attention(q, all_k, all_v, past_k.dims[2], scale, cache_len)
    out = out.permute(0, 3, 1, 2, 4).reshape((B, L, cfg.num_heads * d))
    return out, k, v


class GPT2Attention(Module):
    """GPT-2 self-attention: ``c_attn`` (fused Q/K/V) and ``c_proj``, as ``Linear`` layers."""

    def __init__(self, cfg: DecoderConfig, layer_idx: int):
        super().__init__()
        self.cfg, d = cfg, cfg.hidden_size
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        scale = 1.0 / math.sqrt(cfg.head_dim) if cfg.scale_attn_weights else 1.0
        self.scale = scale / (layer_idx + 1) if cfg.scale_attn_by_inverse_layer_idx else scale

    def forward(self, x, past_k, past_v, cache_len):
        cfg, d = self.cfg, self.cfg.hidden_size
        B, L, _ = x.dims
        qkv = self.c_attn(x)
        q, k, v = (qkv.slice_axis(-1, i * d, (i + 1) * d).reshape((B, L, cfg.num_heads, cfg.head_dim))
                   for i in range(3))
        out, new_k, new_v = _attend(q, k, v, past_k, past_v, cache_len, cfg, self.scale)
        return self.c_proj(out), new_k, new_v


class GPT2MLP(Module):
    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.c_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        kind = _GPT2_ACTS[cfg.activation]
        self.act = {"relu": nn.ReLU, "silu": nn.SiLU}[kind]() if kind in ("relu", "silu") else nn.GELU(
            approximate=kind)

    def forward(self, x):
        return self.c_proj(self.act(self.c_fc(x)))


class GPT2Block(Module):
    def __init__(self, cfg: DecoderConfig, layer_idx: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.attn = GPT2Attention(cfg, layer_idx)
        self.ln_2 = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.mlp = GPT2MLP(cfg)

    def forward(self, x, past_k, past_v, cache_len):
        a, new_k, new_v = self.attn(self.ln_1(x), past_k, past_v, cache_len)
        x = x + a
        return x + self.mlp(self.ln_2(x)), new_k, new_v


class GPT2Model(Module):
    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.wpe = nn.Embedding(cfg.max_positions, cfg.hidden_size)
        self.h = nn.ModuleList([GPT2Block(cfg, i) for i in range(cfg.num_layers)])
        self.ln_f = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)


def _positions(input_ids, past_keys, cache_len):
    """The absolute positions ``(seq,)`` int64 of a step's tokens: after the ``cache_len`` valid cached positions
    (after all ``past`` of them when ``cache_len`` is None)."""
    graph, L = input_ids.graph, input_ids.dims[1]
    if cache_len is None:
        past = past_keys[0].dims[2] if past_keys else 0
        return graph.iota(to_expr("z") + to_expr(past), (L,), DType.int64)
    return graph.iota("z", (L,), DType.int64) + cache_len.cast(DType.int64)


def _last_position(x):
    """``x[:, -1:]`` of (batch, seq, d) as a one-row gather at ``seq - 1`` (before the output head, so a
    prompt step projects one position onto the vocabulary, not all of them)."""
    L = x.dims[1]
    return x.index_select(1, x.graph.iota(to_expr(L) - 1, (1,), DType.int64))


def _rotary(x, positions, inv_freq):
    """Rotary embedding ("rotate half", as Hugging Face's Llama) of ``x`` (batch, seq, heads, d) at float32
    ``positions`` (seq,)."""
    d = x.dims[-1].to_int()
    half = d // 2
    angles = positions.unsqueeze(-1) * inv_freq.unsqueeze(0)           # (seq, half)
    cos, sin = angles.cos().unsqueeze(1), angles.sin().unsqueeze(1)     # (seq, 1, half)
    x1, x2 = x.slice_axis(-1, 0, half), x.slice_axis(-1, half, d)
    return concat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


class LlamaAttention(Module):
    """Llama self-attention: ``q_proj``/``k_proj``/``v_proj``/``o_proj``, RoPE on queries and keys,
    ``num_key_value_heads`` key/value heads (grouped-query attention)."""

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.cfg = cfg
        d, hd = cfg.hidden_size, cfg.head_dim
        self.q_proj = nn.Linear(d, cfg.num_heads * hd, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(d, cfg.num_kv_heads * hd, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(d, cfg.num_kv_heads * hd, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(cfg.num_heads * hd, d, bias=cfg.attention_bias)

    def forward(self, x, past_k, past_v, cache_len, positions, inv_freq):
        cfg = self.cfg
        B, L, _ = x.dims
        q = self.q_proj(x).reshape((B, L, cfg.num_heads, cfg.head_dim))
        k = self.k_proj(x).reshape((B, L, cfg.num_kv_heads, cfg.head_dim))
        v = self.v_proj(x).reshape((B, L, cfg.num_kv_heads, cfg.head_dim))
        q, k = _rotary(q, positions, inv_freq), _rotary(k, positions, inv_freq)
        out, new_k, new_v = _attend(q, k, v, past_k, past_v, cache_len, cfg, 1.0 / math.sqrt(cfg.head_dim))
        return self.o_proj(out), new_k, new_v


class LlamaMLP(Module):
    """SwiGLU: ``down_proj(silu(gate_proj(x)) * up_proj(x))``."""

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        d, f = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = nn.Linear(d, f, bias=cfg.mlp_bias)
        self.up_proj = nn.Linear(d, f, bias=cfg.mlp_bias)
        self.down_proj = nn.Linear(f, d, bias=cfg.mlp_bias)

    def forward(self, x):
        return self.down_proj(self.gate_proj(x).silu() * self.up_proj(x))


class LlamaDecoderLayer(Module):
    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.input_layernorm = nn.RMSNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.self_attn = LlamaAttention(cfg)
        self.post_attention_layernorm = nn.RMSNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.mlp = LlamaMLP(cfg)

    def forward(self, x, past_k, past_v, cache_len, positions, inv_freq):
        a, new_k, new_v = self.self_attn(self.input_layernorm(x), past_k, past_v, cache_len, positions, inv_freq)
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x)), new_k, new_v


class LlamaModel(Module):
    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([LlamaDecoderLayer(cfg) for _ in range(cfg.num_layers)])
        self.norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.norm_eps)


# ---------------------------------------------------------------------------------------------- models
class DecoderLM(Module):
    """Base class of the decoder-only language models; build one with :meth:`from_pretrained` (a Hugging Face
    folder) or :meth:`from_config` (a config dict or :class:`DecoderConfig`, random weights).

    ``forward(input_ids, past_keys, past_values, cache_len=None, last_only=False)`` builds the graph of one
    step: ``input_ids`` a ``(batch, seq)`` int tensor, ``past_keys``/``past_values`` one
    ``(batch, kv_heads, past, head_dim)`` tensor per layer (``past`` may be symbolic), ``cache_len`` a ``(1,)``
    int64 tensor holding how many of the ``past`` positions are valid (None: all of them). The step's tokens sit
    at positions ``cache_len + 0 .. seq - 1``. It returns ``(logits (batch, seq, vocab), keys, values)`` with this
    step's keys and values, ``(batch, kv_heads, seq, head_dim)`` per layer (keys after RoPE), to be stored after
    the valid cached positions (``last_only``: the logits of the last position only, ``(batch, 1, vocab)``).

    The host-side API compiles that graph once per device (:meth:`program`) and runs it:
    :meth:`logits` (a full forward), :meth:`generate` (sampling with the KV cache, streaming or not)."""

    config: DecoderConfig

    def __init__(self, config: DecoderConfig):
        super().__init__()
        object.__setattr__(self, "config", config)
        object.__setattr__(self, "_programs", {})
        object.__setattr__(self, "_programs_lock", threading.Lock())

    # -------------------------------------------------------------- construction
    @staticmethod
    def _class_for(model_type: str):
        return {"gpt2": GPT2LMHeadModel, "llama": LlamaForCausalLM}[model_type]

    @classmethod
    def from_config(cls, config, seed: int | None = None) -> "DecoderLM":
        """A model with random weights (luminal's seeded PyTorch-default init, or ``numpy`` normal draws at
        std 0.02 when ``seed`` is given) from a :class:`DecoderConfig` or a Hugging Face config dict."""
        if not isinstance(config, DecoderConfig):
            config = DecoderConfig.from_dict(config)
        target = cls._class_for(config.model_type) if cls is DecoderLM else cls
        if target._model_type != config.model_type:
            raise ModelConfigError(f"config: 'model_type' is {config.model_type!r}, but {target.__name__} is "
                                   f"a {target._model_type!r} model (use DecoderLM.from_config to dispatch)")
        model = target(config)
        if seed is not None:
            rng = np.random.default_rng(seed)
            for name, p in model.named_parameters():
                if name.endswith(("norm.weight", "ln_1.weight", "ln_2.weight", "ln_f.weight", "layernorm.weight")):
                    continue
                if p.data.ndim >= 2:
                    p.copy_(rng.normal(0.0, 0.02, p.shape))
                else:
                    p.copy_(np.zeros(p.shape))
        return model

    @classmethod
    def from_pretrained(cls, folder) -> "DecoderLM":
        """The model of a Hugging Face folder (``config.json`` with ``model_type`` ``"gpt2"`` or ``"llama"`` +
        ``model.safetensors`` in float32, bfloat16 or float16, a sharded index, or ``pytorch_model.bin``).
        Weights are widened to float32. Checkpoints with or without the task head's prefix (``transformer.`` /
        ``model.``) load; a tied output head (no ``lm_head.weight``) reads the token embedding."""
        where, raw = read_config(folder)
        config = DecoderConfig.from_dict(raw, where)
        model = cls.from_config(config)
        files, state = load_weights(folder)
        model.load_state_dict(model.convert_hf_state(state, files))
        return model

    # -------------------------------------------------------------- weights
    def convert_hf_state(self, state: dict, where: str = "weights") -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    def _getter(self, state: dict, where: str, prefix: str):
        stripped = {}
        for k, v in state.items():
            stripped[k[len(prefix):] if k.startswith(prefix) else k] = v

        def get(name, shape, optional=False):
            if name not in stripped:
                if optional:
                    return None
                raise MissingWeightError(f"{where}: missing tensor {name!r} (expected shape {shape}); is this a "
                                         f"{type(self).__name__} checkpoint?")
            arr = np.asarray(stripped[name])
            if arr.shape != shape:
                raise MissingWeightError(f"{where}: tensor {name!r} has shape {arr.shape}; config.json implies "
                                         f"{shape}")
            return arr.astype(np.float32, copy=False)
        return get

    # -------------------------------------------------------------- graph
    def forward(self, input_ids, past_keys, past_values, cache_len=None, last_only: bool = False):  # pragma: no cover
        raise NotImplementedError

    def program(self, device: str = "cpu", all_logits: bool = False, search: str | None = None) -> "DecoderProgram":
        """The compiled step graph for ``device`` (built and compiled on first use, then reused by every call):
        ``all_logits`` keeps every position's logits (:meth:`logits`), otherwise only the last position's
        (:meth:`generate`)."""
        key = (device, bool(all_logits), search)
        with self._programs_lock:
            prog = self._programs.get(key)
            if prog is None:
                prog = DecoderProgram(self, device, all_logits, search)
                self._programs[key] = prog
        return prog

    def logits(self, input_ids, device: str = "cpu", search: str | None = None) -> np.ndarray:
        """Logits ``(batch, seq, vocab)`` (``(seq, vocab)`` for 1-D ids) of a full forward without a cache."""
        ids, single = _as_ids(input_ids, self.config)
        cache = KVCache.empty(self.config, ids.shape[0], capacity=ids.shape[1])
        out, _ = self.program(device, all_logits=True, search=search).step(ids, cache)
        return out[0] if single else out

    def generate(self, input_ids, max_new_tokens: int, do_sample: bool = False, temperature: float = 1.0,
                 top_k: int | None = None, top_p: float | None = None, seed=None, eos_token_id=None,
                 stream: bool = False, device: str = "cpu", search: str | None = None):
        """Continue ``input_ids`` (1-D ids, or a ``(batch, seq)`` array of equally long prompts) by up to
        ``max_new_tokens`` tokens with the KV cache: one prompt step, then one step per token, all on the one
        compiled program of :meth:`program` (no recompiles).

        ``do_sample=False`` is greedy (the first maximum); ``do_sample=True`` draws from
        ``softmax(logits / temperature)`` restricted by ``top_k`` (the ``k`` largest) and ``top_p`` (the
        smallest set of tokens whose probability reaches ``top_p``), with ``seed`` (an int or a
        ``numpy.random.Generator``). ``eos_token_id`` (an int or a list; default none) stops a row when it
        emits one; finished rows then repeat it until every row has finished.

        ``device``/``search``: the program's (:meth:`program`; ``search`` is ``Graph.compile``'s kernel search).
        ``stream=False`` returns the prompt followed by the new tokens (``(batch, seq + n)`` int64, or 1-D for
        a 1-D prompt); ``stream=True`` returns an iterator yielding each new token as soon as it is chosen (an
        int for a 1-D prompt, a ``(batch,)`` array otherwise)."""
        ids, single = _as_ids(input_ids, self.config)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be a non-negative int, got {max_new_tokens!r}")
        total = ids.shape[1] + int(max_new_tokens)
        if total > self.config.max_positions:
            raise ValueError(f"prompt ({ids.shape[1]} tokens) + max_new_tokens ({max_new_tokens}) = {total} exceeds "
                             f"the model's {self.config.max_positions} positions")
        _check_sampling(temperature, top_k, top_p)
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        eos = set() if eos_token_id is None else set(np.atleast_1d(np.asarray(eos_token_id)).tolist())
        prog = self.program(device, search=search)  # built (and errors raised) now, not at a stream's first next()
        it = self._generate_iter(prog, ids, int(max_new_tokens), do_sample, temperature, top_k, top_p, rng, eos)
        if stream:
            return (int(t[0]) for t in it) if single else it
        new = list(it)
        out = np.concatenate([ids] + [t[:, None] for t in new], axis=1) if new else ids.copy()
        return out[0] if single else out

    def _generate_iter(self, prog, ids, max_new_tokens, do_sample, temperature, top_k, top_p, rng, eos
                       ) -> Iterator[np.ndarray]:
        if max_new_tokens == 0:
            return
        # room for every position at once: the program's ``past`` symbol (the capacity) never changes
        cache = KVCache.empty(self.config, ids.shape[0], capacity=ids.shape[1] + max_new_tokens)
        done = np.zeros(ids.shape[0], bool)
        step_ids = ids
        for n in range(max_new_tokens):
            logits, cache = prog.step(step_ids, cache)
            tok = sample_next(logits[:, -1], do_sample, temperature, top_k, top_p, rng)
            if eos:
                fill = next(iter(eos))
                tok = np.where(done, fill, tok)
                done |= np.isin(tok, list(eos))
            yield tok
            if eos and done.all():
                return
            step_ids = tok[:, None].astype(np.int64)


class GPT2LMHeadModel(DecoderLM):
    """GPT-2 (``model_type: "gpt2"``): ``transformer.wte``/``wpe`` (learned positions), pre-LayerNorm blocks
    (``ln_1``, ``attn.c_attn``, ``attn.c_proj``, ``ln_2``, ``mlp.c_fc``, ``mlp.c_proj``; GELU-tanh), ``ln_f``
    and the output head tied to ``wte`` (an ``lm_head`` of its own when ``tie_word_embeddings`` is false)."""

    _model_type = "gpt2"

    def __init__(self, config: DecoderConfig):
        super().__init__(config)
        self.transformer = GPT2Model(config)
        self.lm_head = None if config.tie_word_embeddings else nn.Linear(config.hidden_size, config.vocab_size,
                                                                        bias=False)
        self.eval()

    def forward(self, input_ids, past_keys, past_values, cache_len=None, last_only: bool = False):
        input_ids = check_graph_tensor(input_ids, type(self).__name__)
        t = self.transformer
        x = t.wte(input_ids) + t.wpe(_positions(input_ids, past_keys, cache_len))
        new_keys, new_values = [], []
        for block, pk, pv in zip(t.h, past_keys, past_values):
            x, k, v = block(x, pk, pv, cache_len)
            new_keys.append(k)
            new_values.append(v)
        x = _last_position(t.ln_f(x)) if last_only else t.ln_f(x)
        logits = t.wte.reverse(x) if self.lm_head is None else self.lm_head(x)
        return logits, new_keys, new_values

    def convert_hf_state(self, state: dict, where: str = "weights") -> dict:
        """Hugging Face GPT-2 tensor names (with or without ``transformer.``) -> this module's; ``Conv1D``
        weights (in, out) are transposed to ``Linear``'s (out, in)."""
        cfg = self.config
        d, f, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
        get = self._getter(state, where, "transformer.")
        out = {"transformer.wte.weight": get("wte.weight", (V, d)),
               "transformer.wpe.weight": get("wpe.weight", (cfg.max_positions, d)),
               "transformer.ln_f.weight": get("ln_f.weight", (d,)), "transformer.ln_f.bias": get("ln_f.bias", (d,))}
        for i in range(cfg.num_layers):
            p = f"h.{i}."
            for name, shape in (("ln_1.weight", (d,)), ("ln_1.bias", (d,)), ("ln_2.weight", (d,)),
                                ("ln_2.bias", (d,)), ("attn.c_attn.bias", (3 * d,)), ("attn.c_proj.bias", (d,)),
                                ("mlp.c_fc.bias", (f,)), ("mlp.c_proj.bias", (d,))):
                out["transformer." + p + name] = get(p + name, shape)
            for name, shape in (("attn.c_attn.weight", (d, 3 * d)), ("attn.c_proj.weight", (d, d)),
                                ("mlp.c_fc.weight", (d, f)), ("mlp.c_proj.weight", (f, d))):
                out["transformer." + p + name] = np.ascontiguousarray(get(p + name, shape).T)
        if self.lm_head is not None:
            head = get("lm_head.weight", (V, d), optional=True)
            out["lm_head.weight"] = out["transformer.wte.weight"] if head is None else head
        return out


class LlamaForCausalLM(DecoderLM):
    """Llama (``model_type: "llama"``): ``model.embed_tokens``, decoder layers (``input_layernorm`` RMSNorm,
    ``self_attn`` with RoPE and ``num_key_value_heads`` key/value heads, ``post_attention_layernorm``, SwiGLU
    ``mlp``), ``model.norm`` and ``lm_head`` (tied to the embedding when ``tie_word_embeddings``)."""

    _model_type = "llama"

    def __init__(self, config: DecoderConfig):
        super().__init__(config)
        self.model = LlamaModel(config)
        self.lm_head = None if config.tie_word_embeddings else nn.Linear(config.hidden_size, config.vocab_size,
                                                                        bias=False)
        hd = config.head_dim
        # Hugging Face's default RoPE frequencies, computed in float32 as it does
        inv = 1.0 / (config.rope_theta ** (np.arange(0, hd, 2, dtype=np.int64).astype(np.float32) / hd))
        object.__setattr__(self, "rope_inv_freq", inv.astype(np.float32))
        self.eval()

    def forward(self, input_ids, past_keys, past_values, cache_len=None, last_only: bool = False):
        input_ids = check_graph_tensor(input_ids, type(self).__name__)
        m, graph = self.model, input_ids.graph
        positions = _positions(input_ids, past_keys, cache_len).cast(DType.float32)
        inv_freq = graph.tensor(self.rope_inv_freq.shape, "float32", "rope_inv_freq").set(self.rope_inv_freq).keep()
        x = m.embed_tokens(input_ids)
        new_keys, new_values = [], []
        for layer, pk, pv in zip(m.layers, past_keys, past_values):
            x, k, v = layer(x, pk, pv, cache_len, positions, inv_freq)
            new_keys.append(k)
            new_values.append(v)
        x = _last_position(m.norm(x)) if last_only else m.norm(x)
        logits = m.embed_tokens.reverse(x) if self.lm_head is None else self.lm_head(x)
        return logits, new_keys, new_values

    def convert_hf_state(self, state: dict, where: str = "weights") -> dict:
        """Hugging Face Llama tensor names (with or without ``model.``) -> this module's."""
        cfg = self.config
        d, f, V, hd = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.head_dim
        qd, kvd = cfg.num_heads * hd, cfg.num_kv_heads * hd
        get = self._getter(state, where, "model.")
        out = {"model.embed_tokens.weight": get("embed_tokens.weight", (V, d)),
               "model.norm.weight": get("norm.weight", (d,))}
        for i in range(cfg.num_layers):
            p = f"layers.{i}."
            shapes = [("input_layernorm.weight", (d,)), ("post_attention_layernorm.weight", (d,)),
                      ("self_attn.q_proj.weight", (qd, d)), ("self_attn.k_proj.weight", (kvd, d)),
                      ("self_attn.v_proj.weight", (kvd, d)), ("self_attn.o_proj.weight", (d, qd)),
                      ("mlp.gate_proj.weight", (f, d)), ("mlp.up_proj.weight", (f, d)),
                      ("mlp.down_proj.weight", (d, f))]
            if cfg.attention_bias:
                shapes += [("self_attn.q_proj.bias", (qd,)), ("self_attn.k_proj.bias", (kvd,)),
                           ("self_attn.v_proj.bias", (kvd,)), ("self_attn.o_proj.bias", (d,))]
            if cfg.mlp_bias:
                shapes += [("mlp.gate_proj.bias", (f,)), ("mlp.up_proj.bias", (f,)), ("mlp.down_proj.bias", (d,))]
            for name, shape in shapes:
                out["model." + p + name] = get(p + name, shape)
        if self.lm_head is not None:
            out["lm_head.weight"] = get("lm_head.weight", (V, d))
        return out


# ---------------------------------------------------------------------------------------------- running
class KVCache:
    """The cached keys and values of every layer: ``keys[i]`` / ``values[i]`` are ``(batch, kv_heads, capacity,
    head_dim)`` float32 arrays whose first ``length`` positions are valid (keys after RoPE, as Hugging Face's
    caches hold them).

    :meth:`DecoderProgram.step` writes each step's keys and values after the valid positions, in place, and
    passes these same arrays to the next execute: that is how the cache is carried between executes. When a step
    needs more room the arrays are reallocated to a multiple of ``bucket`` positions (:meth:`reserve`): the
    compiled program's ``past`` symbol is the capacity, so it changes only then (``bucket=1``: the capacity is
    the exact cached length at every step)."""

    def __init__(self, keys: list, values: list, length: int = 0, bucket: int = 64):
        if isinstance(bucket, bool) or not isinstance(bucket, (int, np.integer)) or bucket < 1:
            raise ValueError(f"bucket must be an int >= 1, got {bucket!r}")
        self.keys, self.values, self.length, self.bucket = list(keys), list(values), int(length), int(bucket)

    @classmethod
    def empty(cls, config: DecoderConfig, batch: int, capacity: int = 0, bucket: int = 64) -> "KVCache":
        """An empty cache for ``batch`` rows with room for ``capacity`` positions."""
        shape = (batch, config.num_kv_heads, int(capacity), config.head_dim)
        return cls([np.zeros(shape, np.float32) for _ in range(config.num_layers)],
                   [np.zeros(shape, np.float32) for _ in range(config.num_layers)], 0, bucket)

    @property
    def batch(self) -> int:
        return self.keys[0].shape[0] if self.keys else 0

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2] if self.keys else 0

    def reserve(self, positions: int) -> None:
        """Make room for ``positions`` positions in all (rounded up to a multiple of ``bucket``), keeping the
        valid ones."""
        if positions <= self.capacity:
            return
        cap = -(-positions // self.bucket) * self.bucket
        for arrays in (self.keys, self.values):
            for i, old in enumerate(arrays):
                new = np.zeros(old.shape[:2] + (cap,) + old.shape[3:], np.float32)
                new[:, :, :self.length] = old[:, :, :self.length]
                arrays[i] = new

    def valid(self) -> tuple[list, list]:
        """Views of the valid positions: ``([keys[:, :, :length]], [values[:, :, :length]])``."""
        return ([k[:, :, :self.length] for k in self.keys], [v[:, :, :self.length] for v in self.values])


class DecoderProgram:
    """One step of a :class:`DecoderLM` as a graph compiled once for ``device`` (``"cpu"``: generated C;
    ``"reference"``: the numpy interpreter) over the symbols ``batch``, ``seq`` and ``past`` (the cache's
    capacity; how many of its positions are valid is the ``cache_len`` input's value).

    Attributes: ``graph``; the inputs ``input_ids``, ``cache_len`` and ``past_keys``/``past_values``; the
    outputs ``logits`` (``(batch, seq, vocab)`` with ``all_logits``, else the last position's
    ``(batch, 1, vocab)``) and ``new_keys``/``new_values`` (the step's, ``(batch, kv_heads, seq, head_dim)``);
    ``compiles`` (how many times the graph was compiled: 1)."""

    def __init__(self, model: DecoderLM, device: str = "cpu", all_logits: bool = False, search: str | None = None):
        if device not in ("cpu", "reference"):
            raise ValueError(f"device must be 'cpu' or 'reference', got {device!r}")
        cfg = model.config
        self.config, self.device, self.all_logits = cfg, device, all_logits
        self._lock = threading.Lock()
        cx = Graph()
        self.graph = cx
        self.input_ids = cx.tensor(("batch", "seq"), "int64", "input_ids")
        self.cache_len = cx.tensor(1, "int64", "cache_len")
        shape = ("batch", cfg.num_kv_heads, "past", cfg.head_dim)
        self.past_keys = [cx.tensor(shape, "float32", f"past_key.{i}") for i in range(cfg.num_layers)]
        self.past_values = [cx.tensor(shape, "float32", f"past_value.{i}") for i in range(cfg.num_layers)]
        logits, new_keys, new_values = model(self.input_ids, self.past_keys, self.past_values, self.cache_len,
                                             last_only=not all_logits)
        self.logits = logits.retrieve()
        self.new_keys = [k.retrieve() for k in new_keys]
        self.new_values = [v.retrieve() for v in new_values]
        handles = {"l": self.logits, "k": self.new_keys, "v": self.new_values, "i": self.input_ids,
                   "n": self.cache_len, "pk": self.past_keys, "pv": self.past_values}
        cx.compile(remap=handles, device=device, search=search if device == "cpu" else None)
        self.compiles = 1

    def step(self, input_ids: np.ndarray, cache: KVCache) -> tuple[np.ndarray, KVCache]:
        """Run ``input_ids`` (``(batch, seq)`` int64) after the ``cache.length`` cached positions; the step's keys
        and values are written into ``cache`` (grown if needed) and ``cache.length`` advances by ``seq``.
        Returns ``(logits, cache)``."""
        ids = np.ascontiguousarray(input_ids, dtype=np.int64)
        _check_ids(ids, self.config)
        if cache.batch != ids.shape[0]:
            raise ValueError(f"the cache holds {cache.batch} rows but input_ids has {ids.shape[0]}")
        n, seq = cache.length, ids.shape[1]
        if n + seq > self.config.max_positions:
            raise ValueError(f"{n} cached + {seq} new tokens exceed the model's {self.config.max_positions} "
                             "positions")
        cache.reserve(n + seq)
        with self._lock:
            self.input_ids.set(ids)
            self.cache_len.set(np.array([n], np.int64))
            for t, arr in zip(self.past_keys, cache.keys):
                t.set(arr)
            for t, arr in zip(self.past_values, cache.values):
                t.set(arr)
            self.graph.execute()
            logits = self.logits.data()
            # the carry: this step's keys/values go into the cache arrays, the next execute's inputs
            for t, arr in zip(self.new_keys, cache.keys):
                arr[:, :, n:n + seq] = t.data(copy=False)
            for t, arr in zip(self.new_values, cache.values):
                arr[:, :, n:n + seq] = t.data(copy=False)
        cache.length = n + seq
        return logits, cache


# ---------------------------------------------------------------------------------------------- sampling
def _as_ids(input_ids, config: DecoderConfig) -> tuple[np.ndarray, bool]:
    ids = np.asarray(input_ids)
    if ids.dtype == object or (ids.size and ids.dtype.kind not in "iu"):
        raise ValueError(f"input_ids must be integer token ids, got dtype {ids.dtype}")
    single = ids.ndim == 1
    if single:
        ids = ids[None, :]
    if ids.ndim != 2:
        raise ValueError(f"input_ids must be 1-D (seq,) or 2-D (batch, seq), got shape {ids.shape}")
    if ids.shape[0] < 1 or ids.shape[1] < 1:
        raise ValueError(f"input_ids must hold at least one row and one token, got shape {ids.shape}")
    ids = ids.astype(np.int64)
    _check_ids(ids, config)
    return ids, single


def _check_ids(ids: np.ndarray, config: DecoderConfig) -> None:
    if ids.ndim != 2:
        raise ValueError(f"input_ids must be (batch, seq), got shape {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= config.vocab_size):
        bad = ids[(ids < 0) | (ids >= config.vocab_size)].flat[0]
        raise IndexError(f"token id {int(bad)} is out of range: the vocabulary has {config.vocab_size} ids "
                         f"(0 .. {config.vocab_size - 1})")
    if ids.shape[1] > config.max_positions:
        raise ValueError(f"input_ids has {ids.shape[1]} tokens; the model has {config.max_positions} positions")


def _check_sampling(temperature, top_k, top_p) -> None:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature must be a positive number, got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1):
        raise ValueError(f"top_k must be None or an int >= 1, got {top_k!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float))
                              or not 0 < top_p <= 1):
        raise ValueError(f"top_p must be None or a number in (0, 1], got {top_p!r}")


def sampling_distribution(logits, temperature: float = 1.0, top_k: int | None = None,
                          top_p: float | None = None) -> np.ndarray:
    """The distribution :func:`sample_next` draws from, ``(batch, vocab)`` float64: ``softmax(logits /
    temperature)`` with only the ``top_k`` largest logits kept (ties at the k-th value kept too), then only the
    smallest set of most probable tokens whose probability sum reaches ``top_p`` (at least one token),
    renormalized (the order of Hugging Face's temperature, top-k and top-p warpers)."""
    _check_sampling(temperature, top_k, top_p)
    x = np.asarray(logits, np.float64)
    if x.ndim == 1:
        x = x[None]
    x = x / float(temperature)
    if top_k is not None and top_k < x.shape[-1]:
        kth = np.sort(x, axis=-1)[:, -top_k][:, None]
        x = np.where(x < kth, -np.inf, x)
    x = x - x.max(-1, keepdims=True)
    p = np.exp(x)
    p /= p.sum(-1, keepdims=True)
    if top_p is not None and top_p < 1:
        order = np.argsort(-p, axis=-1, kind="stable")
        sorted_p = np.take_along_axis(p, order, -1)
        before = np.cumsum(sorted_p, -1) - sorted_p          # mass of the more probable tokens
        keep_sorted = before < top_p                          # the first token is always kept
        keep = np.zeros_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, -1)
        p = np.where(keep, p, 0.0)
        p /= p.sum(-1, keepdims=True)
    return p


def sample_next(logits, do_sample: bool = False, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None, rng: np.random.Generator | None = None) -> np.ndarray:
    """The next token of each row of ``logits`` (``(batch, vocab)``), as ``(batch,)`` int64.

    Greedy (``do_sample=False``): the first maximum of each row. Sampling: a draw with ``rng`` (a
    ``numpy.random.Generator``; a fresh unseeded one if None) from :func:`sampling_distribution`."""
    logits = np.asarray(logits, np.float64)
    if logits.ndim == 1:
        logits = logits[None]
    if not do_sample:
        return np.argmax(logits, axis=-1).astype(np.int64)
    p = sampling_distribution(logits, temperature, top_k, top_p)
    rng = rng if rng is not None else np.random.default_rng()
    out = np.empty(p.shape[0], np.int64)
    for r in range(p.shape[0]):
        out[r] = rng.choice(p.shape[1], p=p[r])
    return out
