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
seedable ``numpy.random.Generator`` (:mod:`.sampling`). The configuration and the layers are in
:mod:`.decoder_arch`. See ``docs/models.md``.
"""

from __future__ import annotations

import threading
from typing import Iterator

import numpy as np

from .. import nn
from ..dtype import DType
from ..graph import Graph
from ..module import Module, check_graph_tensor
from ._hf import MissingWeightError, ModelConfigError, load_weights, read_config
from .decoder_arch import DecoderConfig, GPT2Model, LlamaModel, _last_position, _positions, causal_attention
from .sampling import _check_sampling, sample_next, sampling_distribution  # noqa: F401  (re-exported)

__all__ = ["DecoderConfig", "DecoderLM", "GPT2LMHeadModel", "LlamaForCausalLM", "DecoderProgram", "KVCache",
           "sample_next", "sampling_distribution", "causal_attention"]

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
    def from_pretrained(cls, folder, weight_dtype=None) -> "DecoderLM":
        """The model of a Hugging Face folder (``config.json`` with ``model_type`` ``"gpt2"`` or ``"llama"`` +
        ``model.safetensors`` in float32, bfloat16 or float16, a sharded index, or ``pytorch_model.bin``).
        Weights are widened to float32. Checkpoints with or without the task head's prefix (``transformer.`` /
        ``model.``) load; a tied output head (no ``lm_head.weight``) reads the token embedding. ``weight_dtype``
        (e.g. ``"bfloat16"``) then stores the parameters in that floating dtype (:meth:`Module.to`: half the
        memory, and decoding, which is bound by reading the weights, reads 2 bytes per weight); activations, the
        KV cache and the logits stay float32."""
        where, raw = read_config(folder)
        config = DecoderConfig.from_dict(raw, where)
        model = cls.from_config(config)
        files, state = load_weights(folder)
        model.load_state_dict(model.convert_hf_state(state, files))
        return model if weight_dtype is None else model.to(weight_dtype)

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
        x = t.wte(input_ids).float() + t.wpe(_positions(input_ids, past_keys, cache_len)).float()  # (float32)
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
        x = m.embed_tokens(input_ids).float()  # (float32 activations, also with bfloat16 / float16 weights)
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
