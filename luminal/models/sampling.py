"""Choosing the next token from a decoder's logits on the host (numpy): greedy, temperature, top-k and top-p
(nucleus) filtering, with a seedable generator (:func:`sample_next`, :func:`sampling_distribution`); used by
:meth:`luminal.models.DecoderLM.generate`."""

from __future__ import annotations

import numpy as np


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
