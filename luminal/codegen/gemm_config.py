"""Blocking configurations of luminal's own GEMM (:mod:`luminal.codegen.gemm`): the register tile ``mr x nr`` and
the cache blocks ``kc / mc / nc`` per dtype, the machine's vector width and register count, the default
configuration and the candidates the measured search times (:func:`candidate_configs`).
"""

from __future__ import annotations

import functools
import re
import subprocess
from dataclasses import dataclass


_ITEMSIZE = {"float32": 4, "float64": 8}
_CTYPE = {"float32": "float", "float64": "double"}


@dataclass(frozen=True)
class GemmConfig:
    """Blocking of one own-GEMM variant.

    ``mr x nr`` is the register tile (``nr`` a multiple of the vector width in elements), ``kc`` the K block of
    the packed panels, ``mc`` (a multiple of ``mr``) the rows of a packed A block (meant for L2), ``nc`` (a
    multiple of ``nr``) the columns of a packed B panel (meant for L3).
    """

    mr: int
    nr: int
    kc: int
    mc: int
    nc: int

    def tag(self) -> str:
        """A unique, C-identifier-safe text for this config, e.g. ``"6x16_k256_m96_n2048"``."""
        return f"{self.mr}x{self.nr}_k{self.kc}_m{self.mc}_n{self.nc}"

    def validate(self, dtype: str) -> None:
        """Raise ``ValueError`` unless this config is usable for ``dtype`` at this machine's vector width."""
        w = _width(dtype)
        if min(self.mr, self.nr, self.kc, self.mc, self.nc) <= 0:
            raise ValueError(f"GemmConfig {self}: all sizes must be positive")
        if self.nr % w:
            raise ValueError(f"GemmConfig {self}: nr must be a multiple of the vector width ({w} {dtype})")
        if self.mc % self.mr or self.nc % self.nr:
            raise ValueError(f"GemmConfig {self}: mc must be a multiple of mr and nc of nr")


@functools.lru_cache(maxsize=None)
def vector_bytes() -> int:
    """The SIMD width gcc ``-march=native`` targets here, in bytes: 64 with ``__AVX512F__``, 32 with
    ``__AVX__``, else 16 (also when there is no compiler or it fails). Cached for the process."""
    from .toolchain import find_compiler

    cc = find_compiler()
    if cc is None:
        return 16
    try:
        out = subprocess.run([cc, "-march=native", "-dM", "-E", "-"], input="", capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return 16
    macros = set(re.findall(r"^#define (\w+)", out, re.M))
    if "__AVX512F__" in macros:
        return 64
    if "__AVX__" in macros:
        return 32
    return 16


def _width(dtype: str) -> int:
    if dtype not in _ITEMSIZE:
        raise ValueError(f"own GEMM supports float32 and float64, not {dtype!r}")
    return vector_bytes() // _ITEMSIZE[dtype]


def _registers() -> int:
    return 32 if vector_bytes() == 64 else 16


def _tile_ok(dtype: str, mr: int, nr: int) -> bool:
    """Accumulators + one row of B + one broadcast of A fit in the vector registers."""
    w = _width(dtype)
    if nr % w:
        return False
    nv = nr // w
    return mr * nv + nv + 1 <= _registers()


def _make(dtype: str, mr: int, nr: int, kc: int, mc: int, nc: int) -> GemmConfig:
    """A config with mc / nc rounded to multiples of mr / nr."""
    mc = max(mr, (mc + mr - 1) // mr * mr)
    nc = max(nr, (nc + nr - 1) // nr * nr)
    return GemmConfig(mr, nr, kc, mc, nc)


# Register tiles by vector width (bytes) and dtype, best first: (mr, nr), mr * nr / W accumulators plus nr / W
# vectors of B and one broadcast of A must fit in the vector registers (16, or 32 with AVX-512).
# AVX2/FMA: 6x16 f32 = 12 ymm accumulators, 2 loads of B and 6 broadcasts of A per 12 FMAs.
_TILES = {
    (32, "float32"): [(6, 16), (4, 24), (5, 16), (4, 16)],
    (32, "float64"): [(6, 8), (4, 12), (5, 8), (4, 8)],
    (64, "float32"): [(12, 32), (8, 48), (14, 32), (6, 64)],
    (64, "float64"): [(12, 16), (8, 24), (14, 16), (6, 32)],
    (16, "float32"): [(6, 8), (4, 12), (5, 8), (4, 8)],
    (16, "float64"): [(6, 4), (4, 6), (5, 4), (4, 4)],
}

# Default blocks (kc, mc, nc) by vector width and dtype; see default_config.
_BLOCKS = {
    (32, "float32"): (384, 48, 2048),
    (32, "float64"): (384, 48, 1024),
    (64, "float32"): (256, 96, 2048),
    (64, "float64"): (256, 96, 1024),
    (16, "float32"): (384, 96, 2048),
    (16, "float64"): (384, 96, 1024),
}


def default_config(dtype: str) -> GemmConfig:
    """The best all-round config for this CPU's vector width and ``dtype`` (``"float32"`` / ``"float64"``).

    The register tile is the first of ``_TILES`` (AVX2: 6x16 f32, 6x8 f64: 12 accumulators); the K block keeps
    the ``kc x nr`` sliver of B within L1 (kc = 384: 24 KiB for both dtypes on AVX2; fewer, longer K blocks
    also mean fewer passes over C), the ``mc x kc`` block of A (mc = 48: 72 / 144 KiB) within L2 and the
    ``kc x nc`` panel of B (3 MiB) within L3. Measured on a 2-core Zen 3 (AVX2) against kc 256-512, mc 48-120,
    4x24 / 4x16 tiles: within a few percent of each other, this one the most even over the shapes; the
    AVX-512 and SSE choices follow the same rules but are untimed.
    """
    _width(dtype)
    mr, nr = _TILES[(vector_bytes(), dtype)][0]
    kc, mc, nc = _BLOCKS[(vector_bytes(), dtype)]
    return _make(dtype, mr, nr, kc, mc, nc)


def _balanced_kc(kc: int, K: int) -> int:
    """The K block the generated code uses for ``kc`` on a K-deep problem: K split into equal blocks <= kc."""
    K = max(K, 1)
    return -(-K // -(-K // max(kc, 1)))


def _behaviour(cfg: GemmConfig, M: int, N: int, K: int) -> tuple:
    """What a config does on an M x N x K problem: blocks larger than the problem act as the problem's size."""
    return (cfg.mr, cfg.nr, _balanced_kc(cfg.kc, K), min(cfg.mc, -(-M // cfg.mr) * cfg.mr),
            min(cfg.nc, -(-N // cfg.nr) * cfg.nr))


def candidate_configs(dtype: str, M: int, N: int, K: int, level: str = "quick") -> list[GemmConfig]:
    """A small search space of configs for an ``M x N x K`` GEMM, ``default_config(dtype)`` first.

    ``level="quick"`` (at most 6): the default, the second register tile, a smaller and a larger K block, a
    larger M block, the other register tiles. ``level="full"`` (12 to 20): the two best register tiles with
    K blocks from 1/2 to 4/3 of the default's, M and N block variants, the other tiles, then combinations.
    All configs are valid for this machine's vector width and sized to the problem: ``kc`` is the K block
    actually used (the generated code splits K into equal blocks of at most ``kc``, e.g. 2 x 300 rather than
    512 + 88), M / N blocks are never above M / N rounded up to the tile. Configs that would behave
    identically on this problem (e.g. two K blocks both >= K) are listed once, so a small problem gets fewer
    candidates.
    """
    if level not in ("quick", "full"):
        raise ValueError(f"level must be 'quick' or 'full', not {level!r}")
    M, N, K = max(int(M), 1), max(int(N), 1), max(int(K), 1)
    base = default_config(dtype)
    tiles = [t for t in _TILES[(vector_bytes(), dtype)] if _tile_ok(dtype, *t)]

    def fit(mr: int, nr: int, kc: int, mc: int, nc: int) -> GemmConfig:
        kc = _balanced_kc(kc, K)
        mc = min(max(mc, mr), -(-M // mr) * mr)
        nc = min(max(nc, nr), -(-N // nr) * nr)
        return _make(dtype, mr, nr, kc, mc, nc)

    out: list[GemmConfig] = [base]  # verbatim: what the renderer uses without a search
    seen = {_behaviour(base, M, N, K)}

    def add(cfg: GemmConfig) -> None:
        key = _behaviour(cfg, M, N, K)
        if key not in seen:
            seen.add(key)
            out.append(cfg)

    b = base
    if level == "quick":
        picks = [fit(b.mr, b.nr, b.kc, b.mc, b.nc)]
        picks += [fit(mr, nr, b.kc, b.mc // b.mr * mr, b.nc) for mr, nr in tiles[1:2]]
        picks += [fit(b.mr, b.nr, int(b.kc * 2 / 3), b.mc, b.nc), fit(b.mr, b.nr, int(b.kc * 4 / 3), b.mc, b.nc),
                  fit(b.mr, b.nr, b.kc, b.mc * 2, b.nc)]
        picks += [fit(mr, nr, b.kc, b.mc // b.mr * mr, b.nc) for mr, nr in tiles[2:]]
        picks += [fit(b.mr, b.nr, b.kc // 2, b.mc * 2, b.nc)]
        for cfg in picks:
            add(cfg)
        return out[:6]
    kscale = [1, 1 / 2, 2 / 3, 5 / 6, 4 / 3]
    for mr, nr in tiles[:2]:
        for f in kscale:
            add(fit(mr, nr, int(b.kc * f), b.mc // b.mr * mr, b.nc))
    for mc in (b.mc // 2, b.mc * 2, b.mc * 3):
        add(fit(b.mr, b.nr, b.kc, mc, b.nc))
    for nc in (b.nc // 4, b.nc * 2):
        add(fit(b.mr, b.nr, b.kc, b.mc, nc))
    for mr, nr in tiles[2:]:
        add(fit(mr, nr, b.kc, b.mc // b.mr * mr, b.nc))
    for mr, nr in tiles[:2]:
        for mc in (b.mc * 2, b.mc * 3):
            for f in (2 / 3, 4 / 3):
                add(fit(mr, nr, int(b.kc * f), mc // b.mr * mr, b.nc))
    for mr, nr in tiles[2:]:
        for f in (2 / 3, 4 / 3):
            add(fit(mr, nr, int(b.kc * f), b.mc // b.mr * mr, b.nc))
    return out[:20]
