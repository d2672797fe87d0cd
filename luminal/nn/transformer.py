"""Transformer blocks with PyTorch's names and semantics, and an MLP helper."""

from __future__ import annotations

import copy

from ..module import Module, ModuleList
from .activation import GELU, ReLU
from .attention import MultiheadAttention
from .dropout import Dropout
from .linear import Linear
from .normalization import LayerNorm


def _activation(activation):
    if isinstance(activation, str):
        if activation == "relu":
            return ReLU()
        if activation == "gelu":
            return GELU()
        raise ValueError(f"activation must be 'relu', 'gelu' or a callable, got {activation!r}")
    return activation


class TransformerEncoderLayer(Module):
    """``torch.nn.TransformerEncoderLayer``: self-attention + feed-forward, post-norm (default) or pre-norm."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation="relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, bias=bias, batch_first=batch_first)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = _activation(activation)

    def _sa(self, x, mask, padding, is_causal):
        out, _ = self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=padding, need_weights=False,
                                is_causal=is_causal)
        return self.dropout1(out)

    def _ff(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        x = src
        if self.norm_first:
            x = x + self._sa(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff(self.norm2(x))
        x = self.norm1(x + self._sa(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff(x))


class TransformerDecoderLayer(Module):
    """``torch.nn.TransformerDecoderLayer``: self-attention, cross-attention over ``memory``, feed-forward."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation="relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, bias=bias, batch_first=batch_first)
        self.multihead_attn = MultiheadAttention(d_model, nhead, bias=bias, batch_first=batch_first)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = _activation(activation)

    def _sa(self, x, mask, padding, is_causal):
        out, _ = self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=padding, need_weights=False,
                                is_causal=is_causal)
        return self.dropout1(out)

    def _mha(self, x, mem, mask, padding, is_causal):
        out, _ = self.multihead_attn(x, mem, mem, attn_mask=mask, key_padding_mask=padding, need_weights=False,
                                     is_causal=is_causal)
        return self.dropout2(out)

    def _ff(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool = False, memory_is_causal: bool = False):
        x = tgt
        if self.norm_first:
            x = x + self._sa(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha(self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            return x + self._ff(self.norm3(x))
        x = self.norm1(x + self._sa(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._mha(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))
        return self.norm3(x + self._ff(x))


class TransformerEncoder(Module):
    """``num_layers`` independent copies of ``encoder_layer`` (names ``layers.0...``), then optional ``norm``."""

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int, norm=None):
        super().__init__()
        self.layers = ModuleList(copy.deepcopy(encoder_layer) for _ in range(num_layers))
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal: bool = False):
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=is_causal)
        return self.norm(x) if self.norm is not None else x


class TransformerDecoder(Module):
    """``torch.nn.TransformerDecoder``: ``num_layers`` independent copies of ``decoder_layer`` (names
    ``layers.0...``), then optional ``norm``."""

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm=None):
        super().__init__()
        self.layers = ModuleList(copy.deepcopy(decoder_layer) for _ in range(num_layers))
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool | None = None, memory_is_causal: bool = False):
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask, memory_key_padding_mask=memory_key_padding_mask,
                      tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        return self.norm(x) if self.norm is not None else x


class Transformer(Module):
    """``torch.nn.Transformer``: an encoder (``encoder.layers.N``, ``encoder.norm``) and a decoder
    (``decoder.layers.N``, ``decoder.norm``) with PyTorch's arguments and state_dict keys; weights of rank >= 2
    start Xavier-uniform, as PyTorch's ``_reset_parameters``."""

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6, num_decoder_layers: int = 6,
                 dim_feedforward: int = 2048, dropout: float = 0.1, activation="relu", custom_encoder=None,
                 custom_decoder=None, layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True):
        super().__init__()
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            layer = TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                                            batch_first, norm_first, bias)
            self.encoder = TransformerEncoder(layer, num_encoder_layers, LayerNorm(d_model, eps=layer_norm_eps,
                                                                                    bias=bias))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            layer = TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                                            batch_first, norm_first, bias)
            self.decoder = TransformerDecoder(layer, num_decoder_layers, LayerNorm(d_model, eps=layer_norm_eps,
                                                                                    bias=bias))
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        from . import init
        for _, p in self.named_parameters():
            if len(p.shape) > 1:
                init.xavier_uniform_(p)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None, src_is_causal: bool | None = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False):
        batch_axis = 0 if self.batch_first else 1
        if src.ndim == 3 and tgt.ndim == 3 and src.dims[batch_axis] != tgt.dims[batch_axis]:
            raise ValueError("Transformer: the batch number of src and tgt must be equal")
        if src.dims[-1] != self.d_model or tgt.dims[-1] != self.d_model:
            raise ValueError(f"Transformer: the feature number of src and tgt must be equal to d_model "
                             f"({self.d_model})")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=bool(src_is_causal))
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                            memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, graph, dtype=None):
        """The ``sz x sz`` float mask with ``-inf`` above the diagonal and 0 elsewhere, as a tensor of ``graph``
        (``torch.nn.Transformer.generate_square_subsequent_mask``)."""
        from ..dtype import DType
        from ..hl_ops import where
        rows = graph.arange(sz, dtype=DType.int64).unsqueeze(-1)
        cols = graph.arange(sz, dtype=DType.int64).unsqueeze(0)
        out = where(cols > rows, float("-inf"), 0.0)
        return out if dtype is None else out.cast(dtype)


class MLP(Module):
    """``fc2(activation(fc1(x)))`` — the feed-forward helper (names ``fc1``, ``fc2``)."""

    def __init__(self, in_features: int, hidden_features: int, out_features: int | None = None,
                 activation="gelu", bias: bool = True):
        super().__init__()
        self.fc1 = Linear(in_features, hidden_features, bias=bias)
        self.act = _activation(activation)
        self.fc2 = Linear(hidden_features, out_features or in_features, bias=bias)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))
