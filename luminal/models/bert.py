"""BERT-family encoders (``model_type: "bert"``) built from :mod:`luminal.nn` layers, loaded from Hugging Face
folders.

The encoder is ``luminal.nn.TransformerEncoder`` of post-norm ``TransformerEncoderLayer``s (BERT's layer is
exactly PyTorch's post-LN encoder layer); Hugging Face's separate ``query``/``key``/``value`` projections are
concatenated into the layer's ``in_proj_weight`` when the weights are loaded (:func:`convert_hf_state`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..module import Module, check_graph_tensor
from .. import nn
from ._hf import MissingWeightError, ModelConfigError, load_weights, read_config

__all__ = ["BertConfig", "BertEmbeddings", "BertModel", "convert_hf_state", "first_token", "mean_pool", "l2_normalize"]

_ACTIVATIONS = {"gelu": lambda: nn.GELU(), "gelu_new": lambda: nn.GELU(approximate="tanh"),
                "gelu_pytorch_tanh": lambda: nn.GELU(approximate="tanh"),
                "gelu_fast": lambda: nn.GELU(approximate="tanh"), "relu": lambda: nn.ReLU(),
                "silu": lambda: nn.SiLU(), "swish": lambda: nn.SiLU()}


@dataclasses.dataclass
class BertConfig:
    """The fields of a Hugging Face ``BertConfig`` that the encoder uses (defaults as in ``transformers``)."""

    vocab_size: int
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0

    @classmethod
    def from_dict(cls, config: dict, where: str = "config.json") -> "BertConfig":
        """Validate a ``config.json`` dict; :class:`ModelConfigError` names the key and what was expected."""
        model_type = config.get("model_type")
        if model_type != "bert":
            raise ModelConfigError(f"{where}: 'model_type' is {model_type!r}; luminal.models knows 'bert' "
                                   "(BERT-family encoders: BertModel checkpoints such as all-MiniLM-L6-v2)")
        kwargs = {}
        for field in dataclasses.fields(cls):
            if field.name not in config:
                if field.default is dataclasses.MISSING:
                    raise ModelConfigError(f"{where}: missing key {field.name!r} (expected an int)")
                continue
            value = config[field.name]
            if field.type == "int" and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ModelConfigError(f"{where}: {field.name!r} is {value!r}; expected a non-negative int")
            if field.type == "float" and (isinstance(value, bool) or not isinstance(value, (int, float))
                                          or value <= 0):
                raise ModelConfigError(f"{where}: {field.name!r} is {value!r}; expected a positive number")
            kwargs[field.name] = value
        if kwargs.get("pad_token_id") is None:
            kwargs.pop("pad_token_id", None)
        out = cls(**kwargs)
        for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                    "max_position_embeddings", "type_vocab_size"):
            if getattr(out, key) < 1:
                raise ModelConfigError(f"{where}: {key!r} is {getattr(out, key)}; expected >= 1")
        if out.hidden_act not in _ACTIVATIONS:
            raise ModelConfigError(f"{where}: 'hidden_act' is {out.hidden_act!r}; expected one of "
                                   f"{sorted(_ACTIVATIONS)}")
        if out.hidden_size % out.num_attention_heads:
            raise ModelConfigError(f"{where}: 'hidden_size' ({out.hidden_size}) must be a multiple of "
                                   f"'num_attention_heads' ({out.num_attention_heads})")
        pet = config.get("position_embedding_type", "absolute")
        if pet != "absolute":
            raise ModelConfigError(f"{where}: 'position_embedding_type' is {pet!r}; expected 'absolute' "
                                   "(relative position embeddings are not supported)")
        for key in ("is_decoder", "add_cross_attention"):
            if config.get(key):
                raise ModelConfigError(f"{where}: {key!r} is true; expected false (encoders only)")
        return out


class BertEmbeddings(Module):
    """Word + absolute position + token-type embeddings, then LayerNorm (Hugging Face names)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        d = config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, d, padding_idx=config.pad_token_id
                                            if 0 <= config.pad_token_id < config.vocab_size else None)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, d)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, d)
        self.LayerNorm = nn.LayerNorm(d, eps=config.layer_norm_eps)

    def forward(self, input_ids, token_type_ids):
        positions = self.position_embeddings(input_ids.graph.arange(input_ids.dims[1])).float()  # (seq, d)
        # (float32 from here on, also with bfloat16 / float16 weights: see BertModel.from_pretrained)
        x = self.word_embeddings(input_ids).float() + positions + self.token_type_embeddings(token_type_ids).float()
        return self.LayerNorm(x)


def first_token(hidden):
    """``hidden[:, 0]``: (batch, seq, d) -> (batch, d), a view (the [CLS] position)."""
    return hidden[:, 0]


def mean_pool(hidden, attention_mask):
    """sentence-transformers' mean pooling: ``sum(h * mask) / max(sum(mask), 1e-9)`` over the sequence axis."""
    m = attention_mask.float().unsqueeze(-1)                       # (batch, seq, 1)
    return (hidden * m).sum(1) / m.sum(1).clip(1e-9, None)


def l2_normalize(x):
    """``torch.nn.functional.normalize(x, p=2, dim=-1)``: ``x / max(||x||, 1e-12)``."""
    return x / (x * x).sum(-1, keepdim=True).sqrt().clip(1e-12, None)


class BertModel(Module):
    """A BERT encoder (Hugging Face ``BertModel``) from :mod:`luminal.nn` layers.

    ``forward(input_ids, attention_mask, token_type_ids)`` takes ``(batch, seq)`` integer tensors
    (``attention_mask``: 1 = token, 0 = padding) and returns ``(last_hidden_state, pooler_output)``;
    ``pooler_output`` (``tanh(dense(h[:, 0]))``) is None without a pooler. Parameter names are luminal's
    (``encoder.layers.0.self_attn.in_proj_weight`` ...); :func:`convert_hf_state` maps Hugging Face's."""

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        layer = nn.TransformerEncoderLayer(config.hidden_size, config.num_attention_heads, config.intermediate_size,
                                           dropout=0.0, activation=_ACTIVATIONS[config.hidden_act](),
                                           layer_norm_eps=config.layer_norm_eps, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, config.num_hidden_layers)
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size) if add_pooling_layer else None
        self.eval()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        input_ids = check_graph_tensor(input_ids, "BertModel")
        if token_type_ids is None:
            token_type_ids = input_ids * 0
        x = self.embeddings(input_ids, token_type_ids)
        pad = None if attention_mask is None else attention_mask.eq(0)  # True = padding (PyTorch's convention)
        hidden = self.encoder(x, src_key_padding_mask=pad)
        pooled = None
        if self.pooler is not None:
            pooled = self.pooler(first_token(hidden)).tanh()
        return hidden, pooled

    @classmethod
    def from_pretrained(cls, folder, add_pooling_layer: bool | None = None, weight_dtype=None) -> "BertModel":
        """A BertModel with the config and weights of a Hugging Face folder (``config.json`` +
        ``model.safetensors`` in float32, bfloat16 or float16, or ``pytorch_model.bin`` with torch installed).
        ``add_pooling_layer`` None: a pooler exactly when the weights have one. ``weight_dtype`` (e.g.
        ``"bfloat16"``) stores the parameters in that floating dtype (:meth:`Module.to`: half the memory, the
        matrix products read 2 bytes per weight); activations are computed in float32 either way."""
        where, raw = read_config(folder)
        config = BertConfig.from_dict(raw, where)
        files, state = load_weights(folder)
        state = strip_prefix(state)
        if add_pooling_layer is None:
            add_pooling_layer = "pooler.dense.weight" in state
        model = cls(config, add_pooling_layer=add_pooling_layer)
        model.load_state_dict(convert_hf_state(state, config, add_pooling_layer, files))
        return model if weight_dtype is None else model.to(weight_dtype)


def strip_prefix(state: dict) -> dict:
    """Hugging Face task heads keep the encoder under ``bert.``: drop that prefix (and heads' own tensors)."""
    if "embeddings.word_embeddings.weight" not in state and "bert.embeddings.word_embeddings.weight" in state:
        return {k[5:]: v for k, v in state.items() if k.startswith("bert.")}
    return state


def convert_hf_state(state: dict, config: BertConfig, pooler: bool = True, where: str = "weights") -> dict:
    """Hugging Face ``BertModel`` tensor names -> :class:`BertModel`'s (Q/K/V concatenated into
    ``in_proj_weight``). A missing or mis-shaped tensor raises :class:`MissingWeightError` naming it and the
    expected shape; tensors the encoder does not use (``embeddings.position_ids``, task heads) are ignored."""
    d, f = config.hidden_size, config.intermediate_size

    def get(name, shape):
        if name not in state:
            raise MissingWeightError(f"{where}: missing tensor {name!r} (expected shape {shape}); is this a "
                                     "BertModel checkpoint?")
        arr = np.asarray(state[name])
        if arr.shape != shape:
            raise MissingWeightError(f"{where}: tensor {name!r} has shape {arr.shape}; config.json implies "
                                     f"{shape}")
        return arr.astype(np.float32, copy=False)

    out = {
        "embeddings.word_embeddings.weight": get("embeddings.word_embeddings.weight", (config.vocab_size, d)),
        "embeddings.position_embeddings.weight": get("embeddings.position_embeddings.weight",
                                                     (config.max_position_embeddings, d)),
        "embeddings.token_type_embeddings.weight": get("embeddings.token_type_embeddings.weight",
                                                       (config.type_vocab_size, d)),
        "embeddings.LayerNorm.weight": get("embeddings.LayerNorm.weight", (d,)),
        "embeddings.LayerNorm.bias": get("embeddings.LayerNorm.bias", (d,)),
    }
    for i in range(config.num_hidden_layers):
        hf, lm = f"encoder.layer.{i}.", f"encoder.layers.{i}."
        qkv = ("query", "key", "value")
        out[lm + "self_attn.in_proj_weight"] = np.concatenate(
            [get(f"{hf}attention.self.{n}.weight", (d, d)) for n in qkv])
        out[lm + "self_attn.in_proj_bias"] = np.concatenate([get(f"{hf}attention.self.{n}.bias", (d,)) for n in qkv])
        for src, dst, shape in (("attention.output.dense.weight", "self_attn.out_proj.weight", (d, d)),
                                ("attention.output.dense.bias", "self_attn.out_proj.bias", (d,)),
                                ("attention.output.LayerNorm.weight", "norm1.weight", (d,)),
                                ("attention.output.LayerNorm.bias", "norm1.bias", (d,)),
                                ("intermediate.dense.weight", "linear1.weight", (f, d)),
                                ("intermediate.dense.bias", "linear1.bias", (f,)),
                                ("output.dense.weight", "linear2.weight", (d, f)),
                                ("output.dense.bias", "linear2.bias", (d,)),
                                ("output.LayerNorm.weight", "norm2.weight", (d,)),
                                ("output.LayerNorm.bias", "norm2.bias", (d,))):
            out[lm + dst] = get(hf + src, shape)
    if pooler:
        out["pooler.weight"] = get("pooler.dense.weight", (d, d))
        out["pooler.bias"] = get("pooler.dense.bias", (d,))
    return out
