"""Workload graphs of ../shared/BENCHMARKS.md built with the tensor API (shared by the benchmark scripts)."""

from __future__ import annotations

import math

import numpy as np

import luminal as lm


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB: ``VmHWM`` of /proc/self/status, which starts afresh at exec.
    (``getrusage(RUSAGE_SELF).ru_maxrss`` keeps the maximum across exec on Linux, so a benchmark child
    started by a big parent would report the parent's peak.)"""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def uniform_params(rng, fan_in: int, shape) -> np.ndarray:
    bound = 1.0 / math.sqrt(fan_in)
    return rng.uniform(-bound, bound, shape).astype(np.float32)


def transformer_layer(batch: int = 8, seq: int = 128, d: int = 256, heads: int = 4, ffn: int = 1024, seed: int = 0):
    """The W5/W6 pre-LN encoder layer forward: ``h = x + out(attn(ln1(x)))``, ``y = h + ffn2(gelu(ffn1(ln2(h))))``.

    Returns ``(graph, x, y, params)`` with PyTorch-layout (out, in) weights set from ``seed``.
    """
    rng = np.random.default_rng(seed)
    cx = lm.Graph()
    x = cx.tensor((batch, seq, d), name="x").set(rng.standard_normal((batch, seq, d)).astype(np.float32))

    def param(name, shape, fan_in):
        return cx.tensor(shape, name=name).set(uniform_params(rng, fan_in, shape))

    def linear(h, w, b):
        return h @ w.T + b

    def layer_norm(h, g, b):
        return h.layer_norm(-1, 1e-5) * g + b

    params = {
        "ln1.weight": cx.tensor(d, name="ln1.weight").set(np.ones(d, np.float32)),
        "ln1.bias": cx.tensor(d, name="ln1.bias").set(np.zeros(d, np.float32)),
        "qkv.weight": param("qkv.weight", (3 * d, d), d), "qkv.bias": param("qkv.bias", (3 * d,), d),
        "out.weight": param("out.weight", (d, d), d), "out.bias": param("out.bias", (d,), d),
        "ln2.weight": cx.tensor(d, name="ln2.weight").set(np.ones(d, np.float32)),
        "ln2.bias": cx.tensor(d, name="ln2.bias").set(np.zeros(d, np.float32)),
        "ffn1.weight": param("ffn1.weight", (ffn, d), d), "ffn1.bias": param("ffn1.bias", (ffn,), d),
        "ffn2.weight": param("ffn2.weight", (d, ffn), ffn), "ffn2.bias": param("ffn2.bias", (d,), ffn),
    }
    p = params
    hd = d // heads
    qkv = linear(layer_norm(x, p["ln1.weight"], p["ln1.bias"]), p["qkv.weight"], p["qkv.bias"])
    qkv = qkv.reshape((batch, seq, 3, heads, hd)).permute(2, 0, 3, 1, 4)  # (3, B, H, S, hd)
    q, k, v = qkv[0], qkv[1], qkv[2]
    att = (q @ k.transpose(-1, -2) * (1.0 / math.sqrt(hd))).softmax(-1) @ v  # (B, H, S, hd)
    att = att.permute(0, 2, 1, 3).reshape((batch, seq, d))
    h = x + linear(att, p["out.weight"], p["out.bias"])
    f = linear(layer_norm(h, p["ln2.weight"], p["ln2.bias"]), p["ffn1.weight"], p["ffn1.bias"]).gelu("tanh")
    y = (h + linear(f, p["ffn2.weight"], p["ffn2.bias"])).retrieve()
    return cx, x, y, params


def torch_transformer_layer(x: np.ndarray, params: dict, heads: int = 4) -> np.ndarray:
    """The same layer in PyTorch (the oracle), from numpy input and parameters."""
    import torch

    t = {k: torch.from_numpy(v) for k, v in params.items()}
    t["x"] = torch.from_numpy(x)
    with torch.no_grad():
        return torch_transformer_layer_t(t, heads).numpy()


def torch_transformer_layer_t(t: dict, heads: int = 4):
    """The layer on a dict of torch tensors (``x`` plus the parameters)."""
    import torch
    import torch.nn.functional as F

    xt = t["x"]
    b, s, d = xt.shape
    hd = d // heads
    qkv = F.linear(F.layer_norm(xt, (d,), t["ln1.weight"], t["ln1.bias"], 1e-5), t["qkv.weight"], t["qkv.bias"])
    q, k, v = qkv.reshape(b, s, 3, heads, hd).permute(2, 0, 3, 1, 4)
    att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), -1) @ v
    h = xt + F.linear(att.permute(0, 2, 1, 3).reshape(b, s, d), t["out.weight"], t["out.bias"])
    f = F.gelu(F.linear(F.layer_norm(h, (d,), t["ln2.weight"], t["ln2.bias"], 1e-5), t["ffn1.weight"],
                        t["ffn1.bias"]), approximate="tanh")
    return h + F.linear(f, t["ffn2.weight"], t["ffn2.bias"])


def jax_transformer_layer(t: dict, heads: int = 4):
    """The layer in JAX (for jax.jit), on a dict of arrays."""
    import jax
    import jax.numpy as jnp

    def ln(h, g, b):
        mu = h.mean(-1, keepdims=True)
        var = ((h - mu) ** 2).mean(-1, keepdims=True)
        return (h - mu) / jnp.sqrt(var + 1e-5) * g + b

    x = t["x"]
    b, s, d = x.shape
    hd = d // heads
    qkv = ln(x, t["ln1.weight"], t["ln1.bias"]) @ t["qkv.weight"].T + t["qkv.bias"]
    q, k, v = qkv.reshape(b, s, 3, heads, hd).transpose(2, 0, 3, 1, 4)
    att = jax.nn.softmax(q @ k.swapaxes(-1, -2) / math.sqrt(hd), -1) @ v
    h = x + att.transpose(0, 2, 1, 3).reshape(b, s, d) @ t["out.weight"].T + t["out.bias"]
    f = jax.nn.gelu(ln(h, t["ln2.weight"], t["ln2.bias"]) @ t["ffn1.weight"].T + t["ffn1.bias"], approximate=True)
    return h + f @ t["ffn2.weight"].T + t["ffn2.bias"]
