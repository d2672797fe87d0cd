"""The architecture of the decoder-only language models of :mod:`luminal.models.decoder`: their configuration
(:class:`DecoderConfig`, read from Hugging Face's ``config.json``) and the layers -- causal attention over a
KV cache, GPT-2's blocks (learned positions, pre-LayerNorm, GELU) and Llama's (RoPE, RMSNorm, grouped-query
attention, SwiGLU) -- with Hugging Face's parameter names."""

from __future__ import annotations

import dataclasses
import math

from .. import nn
from ..dtype import DType
from ..hl_ops import concat, where
from ..module import Module
from ..shape import to_expr
from ._hf import ModelConfigError

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


