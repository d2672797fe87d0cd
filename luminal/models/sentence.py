"""Sentence embeddings (sentence-transformers' Transformer -> Pooling -> Normalize pipeline) over a luminal
BERT encoder, with symbolic ``("batch", "seq")`` inputs: one graph (one compiled program on ``device="cpu"``)
serves every batch size and sentence length."""

from __future__ import annotations

import json
import os
import threading

import numpy as np

from .. import Graph
from ._hf import ModelConfigError, read_json
from .bert import BertModel, first_token, l2_normalize, mean_pool

__all__ = ["SentenceEmbedder", "load_tokenizer"]

_POOLING_MODES = ("pooling_mode_mean_tokens", "pooling_mode_cls_token", "pooling_mode_max_tokens",
                  "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens",
                  "pooling_mode_lasttoken")


def load_tokenizer(folder, max_length: int | None = None):
    """A ``tokenizers.Tokenizer`` from ``folder/tokenizer.json`` (or a WordPiece tokenizer from ``vocab.txt``
    with ``tokenizer_config.json``'s ``do_lower_case``), padding to the longest sequence of a batch and
    truncating to ``max_length`` tokens. Needs the ``tokenizers`` package (``pip install 'luminal[models]'``)."""
    try:
        import tokenizers
    except ImportError:
        raise ImportError("luminal.models needs the 'tokenizers' package to tokenize text: "
                          "pip install 'luminal[models]' (or pass token ids to embed_ids)") from None
    folder = os.fspath(folder)
    tok_json, vocab = os.path.join(folder, "tokenizer.json"), os.path.join(folder, "vocab.txt")
    if os.path.isfile(tok_json):
        tok = tokenizers.Tokenizer.from_file(tok_json)
    elif os.path.isfile(vocab):
        cfg_path = os.path.join(folder, "tokenizer_config.json")
        cfg = read_json(cfg_path) if os.path.isfile(cfg_path) else {}
        tok = tokenizers.BertWordPieceTokenizer(vocab, lowercase=bool(cfg.get("do_lower_case", True)))
    else:
        raise FileNotFoundError(f"{folder!r} has no tokenizer.json or vocab.txt; expected a Hugging Face "
                                "tokenizer (or pass token ids to embed_ids)")
    pad_id = tok.token_to_id("[PAD]")
    tok.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token="[PAD]")
    if max_length is not None:
        tok.enable_truncation(max_length=max_length)
    else:
        tok.no_truncation()
    return tok


def _read_modules(folder: str):
    """sentence-transformers' modules.json as a list of dicts, or None when the folder has none."""
    path = os.path.join(folder, "modules.json")
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            modules = json.load(f)
    except json.JSONDecodeError as err:
        raise ModelConfigError(f"{path}: not valid JSON ({err}); expected a list of modules") from err
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ModelConfigError(f"{path}: expected a JSON list of module objects")
    return modules


def _pooling(folder: str) -> tuple[str, bool]:
    """(pooling mode, normalize) from sentence-transformers' modules.json; mean + normalize without one."""
    modules_path = os.path.join(folder, "modules.json")
    modules = _read_modules(folder)
    if modules is None:
        return "mean", True
    types = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules if isinstance(m, dict)]
    mode, normalize = "mean", "Normalize" in types
    for m in modules:
        kind = str(m.get("type", "")).rsplit(".", 1)[-1]
        if kind == "Pooling":
            cfg_path = os.path.join(folder, m.get("path", ""), "config.json")
            if os.path.isfile(cfg_path):
                cfg = read_json(cfg_path)
                on = [k for k in _POOLING_MODES if cfg.get(k)]
                if on == ["pooling_mode_mean_tokens"]:
                    mode = "mean"
                elif on == ["pooling_mode_cls_token"]:
                    mode = "cls"
                else:
                    raise ModelConfigError(f"{cfg_path}: pooling modes {on}; luminal.models supports exactly one "
                                           "of pooling_mode_mean_tokens, pooling_mode_cls_token")
        elif kind not in ("Transformer", "Normalize"):
            raise ModelConfigError(f"{modules_path}: module type {m.get('type')!r} is not supported; expected "
                                   "Transformer, Pooling and Normalize modules")
    return mode, normalize


class SentenceEmbedder:
    """Sentence embeddings from a BERT-family model: ``encode(["a sentence", ...]) -> (n, hidden)`` float32.

    Build with :meth:`from_pretrained`. The graph has three ``("batch", "seq")`` int64 inputs
    (``input_ids``, ``attention_mask``, ``token_type_ids``); it is compiled once (``device="cpu"``) or run by
    the numpy interpreter (``device="reference"``); every batch size and length reuses it. Sentences are
    tokenized with the ``tokenizers`` package, sorted by length, cut into batches of ``batch_size`` and each
    batch is padded to its longest sentence (as sentence-transformers does); results come back in input order.

    ``search`` is ``Graph.compile``'s kernel-search level (cpu only).

    Attributes: ``model`` (the :class:`BertModel`), ``graph``, ``tokenizer`` (or None), ``max_seq_length``,
    ``pooling`` (``"mean"`` or ``"cls"``), ``normalize``, ``lowercase`` (sentences lowercased before tokenizing:
    ``sentence_bert_config.json``'s ``do_lower_case``). Calls are serialized by a lock.
    """

    def __init__(self, model: BertModel, tokenizer=None, device: str = "cpu", pooling: str = "mean",
                 normalize: bool = True, max_seq_length: int | None = None, return_hidden: bool = False,
                 search: str | None = None):
        if pooling not in ("mean", "cls"):
            raise ValueError(f"pooling must be 'mean' or 'cls', got {pooling!r}")
        if device not in ("cpu", "reference"):
            raise ValueError(f"device must be 'cpu' or 'reference', got {device!r}")
        self.model, self.tokenizer, self.device = model, tokenizer, device
        self.lowercase = False
        self.pooling, self.normalize = pooling, normalize
        limit = model.config.max_position_embeddings
        self.max_seq_length = min(max_seq_length or limit, limit)
        self._lock = threading.Lock()
        cx = Graph()
        self.graph = cx
        self.input_ids = cx.tensor(("batch", "seq"), "int64", "input_ids")
        self.attention_mask = cx.tensor(("batch", "seq"), "int64", "attention_mask")
        self.token_type_ids = cx.tensor(("batch", "seq"), "int64", "token_type_ids")
        hidden, pooled = model(self.input_ids, self.attention_mask, self.token_type_ids)
        emb = mean_pool(hidden, self.attention_mask) if pooling == "mean" else first_token(hidden)
        if normalize:
            emb = l2_normalize(emb)
        self.embedding = emb.retrieve()
        self.hidden = hidden.retrieve() if return_hidden else None
        self.pooled = pooled.retrieve() if (return_hidden and pooled is not None) else None
        # explicit even for "reference", so $LUMINAL_DEVICE cannot turn the interpreter into a C compile
        handles = {"e": self.embedding, "h": self.hidden, "p": self.pooled}
        cx.compile(remap=handles, device=device, search=search if device == "cpu" else None)

    @classmethod
    def from_pretrained(cls, folder, device: str = "cpu", max_seq_length: int | None = None,
                        return_hidden: bool = False, search: str | None = None,
                        weight_dtype=None) -> "SentenceEmbedder":
        """Load a Hugging Face / sentence-transformers folder: ``config.json`` + weights (see
        :meth:`BertModel.from_pretrained`), the tokenizer when present (``tokenizer.json`` or ``vocab.txt``),
        pooling and normalization from ``modules.json`` / ``1_Pooling/config.json`` (mean pooling + L2
        normalization when the folder has no ``modules.json``), ``max_seq_length`` from
        ``sentence_bert_config.json`` unless given. ``return_hidden`` also keeps ``last_hidden_state`` and
        ``pooler_output`` as outputs of :meth:`embed_ids`. ``search`` is passed to ``Graph.compile`` (GEMM
        kernel search on ``device="cpu"``: ``"off"``/None, ``"quick"``, ``"full"``, ``"background"``).
        ``weight_dtype`` (e.g. ``"bfloat16"``) stores the encoder's parameters in that dtype
        (:meth:`BertModel.from_pretrained`); the embeddings are computed in float32."""
        folder = os.fspath(folder)
        model_folder = folder
        for m in _read_modules(folder) or []:  # a sentence-transformers folder: the Transformer module's path
            if str(m.get("type", "")).endswith("Transformer") and m.get("path"):
                model_folder = os.path.join(folder, m["path"])
        model = BertModel.from_pretrained(model_folder, weight_dtype=weight_dtype)
        pooling, normalize = _pooling(folder)
        sb_path = os.path.join(folder, "sentence_bert_config.json")
        sb = read_json(sb_path) if os.path.isfile(sb_path) else {}
        if max_seq_length is None:
            max_seq_length = sb.get("max_seq_length")
            if max_seq_length is not None and (isinstance(max_seq_length, bool) or not isinstance(max_seq_length, int)
                                               or max_seq_length < 1):
                raise ModelConfigError(f"{sb_path}: 'max_seq_length' is {max_seq_length!r}; expected a positive int")
        tokenizer = None
        if any(os.path.isfile(os.path.join(model_folder, n)) for n in ("tokenizer.json", "vocab.txt")):
            limit = min(max_seq_length or model.config.max_position_embeddings,
                        model.config.max_position_embeddings)
            tokenizer = load_tokenizer(model_folder, limit)
        out = cls(model, tokenizer, device, pooling, normalize, max_seq_length, return_hidden, search)
        out.lowercase = bool(sb.get("do_lower_case", False))  # sentence-transformers lowercases before tokenizing
        return out

    # ------------------------------------------------------------------ running
    def embed_ids(self, input_ids, attention_mask=None, token_type_ids=None) -> dict[str, np.ndarray]:
        """Run one padded batch of token ids (``(batch, seq)`` ints; ``attention_mask`` 1 = token, default all
        ones; ``token_type_ids`` default zeros). Returns ``{"sentence_embedding": (batch, hidden)}`` plus
        ``"last_hidden_state"`` and ``"pooler_output"`` when built with ``return_hidden``."""
        ids = np.asarray(input_ids)
        if ids.ndim != 2 or ids.dtype.kind not in "iu":
            raise ValueError(f"input_ids must be a 2-D integer array (batch, seq), got {ids.dtype} {ids.shape}")
        if ids.shape[0] < 1 or ids.shape[1] < 1:
            raise ValueError(f"input_ids must have at least one row and one token, got shape {ids.shape}")
        if ids.shape[1] > self.model.config.max_position_embeddings:
            raise ValueError(f"input_ids has {ids.shape[1]} tokens; the model has "
                             f"{self.model.config.max_position_embeddings} positions (max_position_embeddings)")
        arrays = {"input_ids": ids}
        for name, value, default in (("attention_mask", attention_mask, 1), ("token_type_ids", token_type_ids, 0)):
            arr = np.full(ids.shape, default, np.int64) if value is None else np.asarray(value)
            if arr.shape != ids.shape or arr.dtype.kind not in "iub":
                raise ValueError(f"{name} must be an integer array of input_ids' shape {ids.shape}, got "
                                 f"{arr.dtype} {arr.shape}")
            arrays[name] = arr
        with self._lock:
            self.input_ids.set(arrays["input_ids"].astype(np.int64))
            self.attention_mask.set(arrays["attention_mask"].astype(np.int64))
            self.token_type_ids.set(arrays["token_type_ids"].astype(np.int64))
            self.graph.execute()
            out = {"sentence_embedding": np.array(self.embedding.data())}
            if self.hidden is not None:
                out["last_hidden_state"] = np.array(self.hidden.data())
            if self.pooled is not None:
                out["pooler_output"] = np.array(self.pooled.data())
        return out

    def tokenize(self, sentences) -> dict[str, np.ndarray]:
        """Token ids of ``sentences`` padded to the longest (``input_ids``, ``attention_mask``,
        ``token_type_ids``; ``(n, seq)`` int64)."""
        if self.tokenizer is None:
            raise ValueError("this model folder has no tokenizer (tokenizer.json or vocab.txt); pass token ids "
                             "to embed_ids instead")
        sentences = [s.lower() for s in sentences] if self.lowercase else list(sentences)
        enc = self.tokenizer.encode_batch(sentences)
        return {"input_ids": np.array([e.ids for e in enc], np.int64),
                "attention_mask": np.array([e.attention_mask for e in enc], np.int64),
                "token_type_ids": np.array([e.type_ids for e in enc], np.int64)}

    def encode(self, sentences, batch_size: int = 32) -> np.ndarray:
        """Embeddings of ``sentences`` (a string or a list of strings) as a ``(n, hidden)`` float32 array
        (``(hidden,)`` for a single string), in input order."""
        single = isinstance(sentences, str)
        items = [sentences] if single else list(sentences)
        if not all(isinstance(s, str) for s in items):
            raise TypeError("encode expects a string or a list of strings")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not items:
            return np.zeros((0, self.model.config.hidden_size), np.float32)
        order = np.argsort([-len(s) for s in items], kind="stable")  # similar lengths share a batch
        out = np.empty((len(items), self.model.config.hidden_size), np.float32)
        for start in range(0, len(items), batch_size):
            idx = order[start:start + batch_size]
            batch = self.tokenize([items[i] for i in idx])
            out[idx] = self.embed_ids(**batch)["sentence_embedding"]
        return out[0] if single else out
