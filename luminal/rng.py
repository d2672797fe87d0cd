"""Random number generation as a PyTorch user expects it: ``lm.manual_seed``, ``lm.Generator``,
``lm.get_rng_state`` / ``lm.set_rng_state``, ``lm.seed``, ``lm.initial_seed``.

One process-wide :data:`default_generator` feeds every random draw that has no ``generator=``: the eager
creation functions (``lm.rand randn randint randperm normal bernoulli`` and the ``*_like`` forms), the
initializers of :mod:`luminal.nn.init` (so the weights of freshly constructed layers), the seeds
``nn.Dropout`` modules draw at construction, and the dropout masks of eager code (drawn when the compiled graph
runs). Underneath it is numpy's ``PCG64`` (``Generator.manual_seed(s)`` is ``numpy.random.default_rng(s)``):

* the same seed and the same sequence of draws give bit-identical values in every run, on every machine with
  the same numpy -- within luminal;
* the values are **not** PyTorch's: ``torch.manual_seed(0); torch.rand(3)`` and ``lm.manual_seed(0);
  lm.rand(3)`` differ (PyTorch's CPU generator is an MT19937 with its own transforms), as do the numbers of a
  ``torch.Generator`` and an ``lm.Generator`` with one seed, the states of ``get_rng_state`` (a uint8 tensor
  of 41 bytes here, 5056 in torch) and the default seed at start-up (0 here).
"""

from __future__ import annotations

import threading

import numpy as np

__all__ = ["Generator", "default_generator", "manual_seed", "seed", "initial_seed", "get_rng_state",
           "set_rng_state", "numpy_generator", "eager_build"]

_MAGIC = b"LMR1"
_STATE_BYTES = 41  # magic, PCG64 state and increment (16 bytes each), has_uint32, uinteger


class Generator:
    """``torch.Generator``: an independent random stream (numpy PCG64 underneath) to pass as ``generator=``.

    ``manual_seed(s)`` restarts it (returns itself), ``seed()`` reseeds it from OS entropy and returns the seed,
    ``initial_seed()`` is the last seed, ``get_state()`` / ``set_state(state)`` save and restore the position (a
    uint8 tensor)."""

    def __init__(self, device: str = "cpu"):
        if str(device).split(":")[0] not in ("cpu", "reference"):
            raise RuntimeError(f"lm.Generator: device {device!r} is not available (cpu only)")
        self.device = "cpu"
        self._lock = threading.RLock()
        self.manual_seed(67280421310721)

    def manual_seed(self, seed) -> "Generator":
        """Restart the stream from ``seed`` (an int; negative values are taken modulo 2**64, as torch)."""
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"manual_seed expects an int, got {type(seed).__name__}")
        seed = int(seed) % (1 << 64)
        with self._lock:
            self._seed = seed
            self._np = np.random.default_rng(seed)
        return self

    def seed(self) -> int:
        """Reseed from OS entropy (non-deterministic) and return the new seed."""
        s = int(np.random.SeedSequence().entropy) % (1 << 63)
        self.manual_seed(s)
        return s

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self):
        """The stream position as a uint8 tensor (restore it with :meth:`set_state`)."""
        from .eager import tensor
        with self._lock:
            st = self._np.bit_generator.state
        inner = st["state"]
        raw = (_MAGIC + int(inner["state"]).to_bytes(16, "little") + int(inner["inc"]).to_bytes(16, "little")
               + bytes([int(st["has_uint32"])]) + int(st["uinteger"]).to_bytes(4, "little"))
        return tensor(np.frombuffer(raw, np.uint8).copy())

    def set_state(self, state) -> "Generator":
        """Continue from a position returned by :meth:`get_state` (a uint8 tensor or array)."""
        raw = bytes(np.asarray(state, dtype=np.uint8).reshape(-1))
        if len(raw) != _STATE_BYTES or raw[:4] != _MAGIC:
            raise RuntimeError(f"set_rng_state: not a luminal generator state (expected the {_STATE_BYTES}-byte uint8 "
                               "tensor of get_rng_state(); torch's states cannot be loaded)")
        bg = np.random.PCG64()
        inner = {"state": int.from_bytes(raw[4:20], "little"), "inc": int.from_bytes(raw[20:36], "little")}
        bg.state = {"bit_generator": "PCG64", "state": inner, "has_uint32": raw[36],
                    "uinteger": int.from_bytes(raw[37:41], "little")}
        with self._lock:
            self._np = np.random.Generator(bg)
        return self

    # numpy draws (under the lock), used by luminal's random functions
    def draw(self, method: str, *args, **kwargs):
        with self._lock:
            return getattr(self._np, method)(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<luminal.Generator seed={self._seed}>"


default_generator = Generator()
default_generator.manual_seed(0)


def numpy_generator(generator=None):
    """The ``numpy.random.Generator`` behind ``generator`` (an :class:`Generator`, a numpy Generator, or None:
    the default generator). Callers that draw from it outside the lock are responsible for threads."""
    if generator is None:
        return default_generator._np
    if isinstance(generator, Generator):
        return generator._np
    if isinstance(generator, np.random.Generator):
        return generator
    raise TypeError(f"generator must be an lm.Generator (or a numpy Generator), got {type(generator).__name__}")


def draw(generator, method: str, *args, **kwargs):
    """``numpy_generator(generator).<method>(*args, **kwargs)``, under the generator's lock when it is ours."""
    g = default_generator if generator is None else generator
    if isinstance(g, Generator):
        return g.draw(method, *args, **kwargs)
    return getattr(numpy_generator(g), method)(*args, **kwargs)


def manual_seed(seed) -> Generator:
    """``torch.manual_seed``: restart the default generator (every random draw without ``generator=``)."""
    return default_generator.manual_seed(seed)


def seed() -> int:
    """``torch.seed``: reseed the default generator from OS entropy; returns the seed."""
    return default_generator.seed()


def initial_seed() -> int:
    """``torch.initial_seed``: the default generator's last seed."""
    return default_generator.initial_seed()


def get_rng_state():
    """``torch.get_rng_state``: the default generator's position (a uint8 tensor of 41 bytes)."""
    return default_generator.get_state()


def set_rng_state(state) -> None:
    """``torch.set_rng_state``: continue the default generator from a :func:`get_rng_state` result."""
    default_generator.set_state(state)


_tls = threading.local()


class eager_build:
    """Set while the eager engine builds a graph: dropout then draws its masks from the default generator when
    the graph runs (instead of a per-module seeded stream), so ``lm.manual_seed`` governs eager dropout."""

    def __enter__(self):
        self.prev = getattr(_tls, "on", False)
        _tls.on = True
        return self

    def __exit__(self, *exc):
        _tls.on = self.prev
        return False


def in_eager_build() -> bool:
    return getattr(_tls, "on", False)
