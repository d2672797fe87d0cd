"""Winograd F(2x2, 3x3) and F(4x4, 3x3): a 3x3, stride-1 convolution in 16 multiply-adds per 2 x 2 outputs and
input channel instead of 36, or 36 per 4 x 4 outputs instead of 144.

A form of the direct convolution (:mod:`.gemm_direct`, ``mode="wino"``): the GEMM whose B operand is the window
view of one buffer, ``C[m, n] = sum_k A[m, k] * X'[koff[k] + noff[n]]`` with ``k = (c, kh, kw)`` and ``n =
(outer, oh, ow)``, both kernel axes 3 long and stepping by 1 along the axes the output's rows and columns step
along (a 3x3 convolution's forward, and its input gradient, which is one too). The output is cut into 2 x 2
tiles, each reading a 4 x 4 patch ``d`` of the zero-padded copy per channel, and (Lavin & Gray, 2015)

    Y = A^T [ (G g G^T) * (B^T d B) ] A,  B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
    G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]],  A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]

where ``*`` is elementwise over the 16 positions ``xi`` of a tile and summed over the channels: 16 products
``M_xi[m, t] = sum_c U_xi[m, c] V_xi[c, t]`` (``U = G g G^T`` per output and input channel, ``V = B^T d B`` per
channel and tile). Each output of a tile depends only on the 3 x 3 window it has in ``d`` (the transforms'
zeros are structural), so a partial tile at an odd edge reads past its rows and drops those outputs.

F(4x4, 3x3) (:data:`TRANSFORMS`: B^T 6 x 6 with 4, -5, +-4, +-2; G 6 x 3 with 1/4, 1/6, 1/12, 1/24; A^T 4 x 6
with +-1, +-2, 4, +-8; 36 positions) is taken from ``MIN_F4`` outputs per side and ``MIN_F4_TILES`` 4 x 4 tiles,
at least two per channel (:func:`wino_tile`). There an output depends on its whole 6 x 6 patch in rounding (the
transforms add and subtract values outside its window), so the copy is zero-padded past the image to whole
patches (``gemm_direct``), and a non-finite input may make NaN every output of the tiles whose patch holds it
(its float32 error is 2-4e-6 of the output's sum of magnitudes against the float64 sum, F(2x2)'s 1-4e-7, the
direct kernel's ~3e-7, measured on W4's two layers and 128 channels on 28 x 28 at batch 8).
``LUMINAL_WINOGRAD=2`` keeps F(2x2, 3x3) everywhere. Where a row of tiles fills at most half a 64-byte vector
(W4's 24-wide layers: 6 tiles) the transforms run on half-width vectors (``TVW``): a row at a time, 6 of 16
lanes did work (W4's forward at F(4x4), an instrumented build's per-thread phases: 3.1 -> 2.5 ms).

The kernel (:func:`wino_loops`): A is interleaved by ``MR`` rows (through its prologue's pack callback where it
has one) and transformed once per call; the tiles are taken a *block* of ``R`` rows of tiles at a time
(:func:`wino_geometry`: whole vectors of tiles where it can, the block's 16 transformed channels ``V`` and 16
products at most 512 KiB each), each thread a share of the blocks: the input transform vectorized along a row of
tiles (each vector of 16 tiles reads ``e + 1`` vectors per patch row, split into the ``e`` phases of its
elements by rounds of even / odd shuffles, the last two phases shifted by a lane from the next vector), a channel's
rows of tiles in turn (consecutive rows of the copy), packed one after the other so no lane
idles past a short row; then, position by position (its ``V_xi`` in L1), the products of all output channels as
register tiles of ``MR x NV`` vectors of tiles (the sum over the channels in registers); then the output transform
along the same vectors, its ``e`` columns interleaved back into rows of C (the partial last vectors by masked
stores); the epilogue on the block's outputs. The 16 positions' slabs of ``V`` and of the products lie one cache
line more than their size apart (at a multiple of 4 KiB the transform's 16 stores fell into one L1 set: W4's input
gradient 6.2 -> 5.65 ms).

Taken (:func:`wino_plan`) for float32 and float64 from ``MIN_CHANNELS`` input and output channels and
``MIN_TILES`` tiles (at the least batch), unless ``LUMINAL_WINOGRAD=0``. Rounding: each output sums the same
products in another order plus the transforms' halvings and additions (float32 differences from the direct sum
about 1e-6 relative to the sum of magnitudes). An infinite input may give NaN where the direct sum gives an
infinity (the transforms subtract it from itself).
"""

from __future__ import annotations

import os

from .gemm_config import vector_bytes
from .gemm_stream import TILES

MIN_F4 = 8  # outputs per side from which F(4x4, 3x3) is taken (below, F(2x2, 3x3): fewer rows read past the image)
# 4 x 4 tiles (at the least batch) from which F(4x4, 3x3) is taken, measured (2 cores Zen 4, min ms, F(4x4) /
# F(2x2)): W4's layers (2304, 3136 tiles) 4.2 / 5.4, 5.8 / 6.2; 64 ch 56 x 56 at batch 8 (1568) 5.0 / 5.9, 128 ch
# 28 x 28 at batch 8 (392) 4.7 / 5.6; at batch 1 (196, 49 tiles) 0.90 / 0.74, 1.65 / 0.92; 256 ch 14 x 14 at
# batch 8 (128) 8.4 / 7.2
MIN_F4_TILES = 256
MIN_CHANNELS = 16  # input and output channels from which it is taken (below, the transforms cost the saving)
# tiles (at the least batch) from which it is taken: fewer (a ResNet's 14 x 14 and 7 x 7 stages at batch 1) give
# too few blocks to share out over the threads, and the transformed weights (16/9 of the weights) dominate
MIN_TILES = 192
V_BYTES = 512 * 1024  # the block's transformed input (16 x channels x tiles) at most this (one vector of tiles)
MO_BYTES = 512 * 1024  # the block's 16 products (16 x output channels x tiles) at most this (one vector of tiles)
MAX_VECTORS = 8  # tiles per block at most this many vectors
# the *wide* forms ("2w", "4w": GemmKernel.wino) double both budgets, a measured alternative (the prologue search's
# "wino-f2w" / "wino-f4w"): the cost model above counts lanes and rows computed past the tiles, not where the block's
# slabs stay in cache, and neither budget wins everywhere (2 cores Zen 4, min ms of alternating runs, rules' / wide):
# W4's input gradient (64 -> 32 channels, 26 x 26: blocks of 6 rows of 7 tiles, 42 of 48 lanes, against 16 rows,
# 112 of 112) 6.31 / 5.65 in the training step; 64 ch 56 x 56 at batch 8 5.78 / 5.27, 256 ch 14 x 14 at batch 8
# 7.45 / 6.46, but 128 ch 28 x 28 at batch 8 4.97 / 5.37
WIDE = 2
WIDE_FORMS = ("2w", "4w")
# the register tile's relative speed by its vectors of tiles (with the most rows :data:`.gemm_stream.TILES` has; with
# fewer, times the square root of their share), measured on W4's layers (2 cores Zen 4, min of alternating runs):
# 64 outputs 6 x 4 4.8 ms, 8 x 3 5.2, 12 x 2 5.3, 4 x 4 5.9; 32 outputs (6 x 4 computes 36 rows) 8 x 3 as fast
TILE_EFFICIENCY = {4: 1.0, 3: 0.9, 2: 0.87, 1: 0.75}
# the guards of the shuffles (GCC 12+ / clang) and of AVX-512's masked loads and stores (GCC's builtins); built with
# -DLM_WINO_PORTABLE the kernels take their portable branches instead (tests/test_winograd.py builds them so)
SHUFFLES = "#if (defined(__clang__) || __GNUC__ >= 12) && !defined(LM_WINO_PORTABLE)  /* (__builtin_shufflevector) */"
MASKED = "#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__) && !defined(LM_WINO_PORTABLE)"


def wino_plan(pro, m, k_total, n_least, kdims, steps, last, itemsize, tile=None) -> dict | None:
    """The Winograd geometry of a GEMM of ``m`` rows (constant), ``k_total`` (K; None where symbolic) and at least
    ``n_least`` columns (N at its least binding: a batch of 1) whose B operand is the window prologue ``pro``
    (``kdims`` its kernel's extents, ``steps[d] = (axis, step)`` of its moving axes, ``last`` the copy's innermost
    axis), or None where it does not apply: ``{"kw", "kh", "ow", "oh"}`` (prologue axes), ``"H"`` (the copy axis of
    rows), ``OH``, ``OW``, ``CH`` (input channels), ``M`` (output channels) and the kernel's geometry for elements
    of ``itemsize`` bytes (:func:`wino_geometry`). ``tile`` 2 or 4 sets the tile size (the measured search's choice,
    ``GemmKernel.wino``; 4 only from ``MIN_F4`` outputs per side), None leaves it to :func:`wino_tile`; ``"2w"`` /
    ``"4w"`` are those tiles in *wide* blocks (:data:`WIDE`)."""
    tile, wide = parse_form(tile)
    if os.environ.get("LUMINAL_WINOGRAD", "1") == "0" or pro.side != "b" or not isinstance(k_total, int):
        return None
    if not isinstance(m, int) or m < MIN_CHANNELS or k_total % 9 or k_total // 9 < MIN_CHANNELS:
        return None
    role = {}
    for d, e in enumerate(pro.axes):  # (every axis that may be longer than 1: a symbolic batch too)
        if e is not None and not (isinstance(kdims[d], int) and kdims[d] == 1) and e[0] in ("k", "row"):
            if not isinstance(e[1], int):
                return None
            role.setdefault(e, []).append(d)
    kw, kh, ow = (role.get(e, [None])[0] for e in (("k", 1), ("k", 3), ("row", 1)))
    if None in (kw, kh, ow) or kdims[kw] != 3 or kdims[kh] != 3 or not isinstance(kdims[ow], int):
        return None
    OW = kdims[ow]
    oh = role.get(("row", OW), [None])[0]
    if oh is None or OW < 2 or not isinstance(kdims[oh], int) or any(d not in steps for d in (kw, kh, ow, oh)):
        return None
    OH = kdims[oh]
    if (n_least or 0) // (OH * OW) * (-(-OH // 2)) * (-(-OW // 2)) < MIN_TILES:
        return None
    H = steps[kh][0]
    if steps[kw] != (last, 1) or steps[ow] != (last, 1) or steps[kh] != (H, 1) or steps[oh] != (H, 1) or H == last:
        return None
    for e, ds in role.items():  # the other axes: channels (k) and outer output axes (row), on axes of their own
        for d in ds:
            if d in (kw, kh, ow, oh):
                continue
            if e[1] % (9 if e[0] == "k" else OH * OW) or d in steps and steps[d][0] in (H, last):
                return None
    if any(len(ds) > 1 for e, ds in role.items() if e in (("k", 1), ("k", 3), ("row", 1), ("row", OW))):
        return None
    w = {"kw": kw, "kh": kh, "ow": ow, "oh": oh, "H": H, "OH": OH, "OW": OW, "CH": k_total // 9, "M": m,
         "E": wino_tile(OH, OW, (n_least or 0) // (OH * OW), k_total // 9, m, tile)}
    return {**w, **wino_geometry(w, itemsize, WIDE if wide else 1)}


def parse_form(form) -> tuple:
    """``(tile, wide)`` of a ``GemmKernel.wino`` value other than 0: the tile size (2, 4, or None for the rules')
    and whether its blocks are wide (``"2w"`` / ``"4w"``); ``ValueError`` for an unknown string."""
    if not isinstance(form, str):
        return form, False
    if form not in WIDE_FORMS:
        raise ValueError(f"Winograd form {form!r}: expected 0, 2, 4, '2w', '4w' or None")
    return int(form[0]), True


def wino_tile(oh: int, ow: int, images: int, ch: int, m: int, tile=None) -> int:
    """Outputs per tile side for ``images`` (at the least batch) of ``oh x ow`` outputs, ``ch`` input and ``m``
    output channels: 4 (F(4x4, 3x3): 36 multiply-adds per 16 outputs and channel pair instead of 64) from
    ``MIN_F4`` outputs per side and ``MIN_F4_TILES`` tiles, at least two per channel (its transformed weights, 36
    per channel pair, are read by every block: with fewer tiles they cost more than the products save), else 2;
    ``tile`` (2 or 4: the measured search's choice) replaces the count rule; ``LUMINAL_WINOGRAD=2`` keeps F(2x2, 3x3)
    everywhere."""
    mode = os.environ.get("LUMINAL_WINOGRAD", "1") or "1"
    if mode not in ("0", "1", "2"):
        raise ValueError(f"LUMINAL_WINOGRAD={mode!r}: expected '1' (the default), '2' (F(2x2, 3x3) only) or '0'")
    tiles = images * -(-oh // 4) * -(-ow // 4)
    wanted = tile == 4 if tile is not None else tiles >= max(MIN_F4_TILES, 2 * max(ch, m))
    return 4 if mode == "1" and min(oh, ow) >= MIN_F4 and wanted else 2


def wino_geometry(w: dict, itemsize: int, scale: int = 1) -> dict:
    """Vector width ``VW``, rows of tiles per block ``R``, tiles per row ``TW`` / column ``TH``, the block's vector
    columns ``TS`` (and ``TSP``: a row of the transformed input, with room for a row's last vector), ``MR`` and
    ``NV`` (the register tile) for the geometry ``w`` of :func:`wino_plan` (``w["M"]`` output channels): the
    least estimated time, the products computed past the tiles and channels there are (lanes past a block's
    tiles, rows past the last channel) over the register tile's efficiency (:data:`TILE_EFFICIENCY`), the larger
    block among equals. ``scale`` multiplies the block's budgets (:data:`V_BYTES`, :data:`MO_BYTES`: 1 the rules',
    :data:`WIDE` the wide forms')."""
    vw = vector_bytes() // itemsize
    tiles = TILES[vector_bytes()]
    e = w["E"]
    npos = (e + 2) ** 2
    tw, th, m = -(-w["OW"] // e), -(-w["OH"] // e), w["M"]
    cap = max(1, min(MAX_VECTORS, scale * V_BYTES // (npos * w["CH"] * itemsize * vw),
                     scale * MO_BYTES // (npos * m * itemsize * vw)))
    best = None
    for r in range(1, max(1, cap * vw // tw) + 1):
        ts = -(-(r * tw) // vw) * vw
        for nv in range(1, min(4, ts // vw) + 1):
            for mr in range(2, tiles[nv] + 1):
                eff = TILE_EFFICIENCY[nv] * (mr / tiles[nv]) ** 0.5
                cost = round(-(-m // mr) * mr * ts / (m * r * tw) / eff, 6)
                if best is None or (cost, -r) < best[0]:
                    best = ((cost, -r), r, ts, nv, mr)
    _, r, ts, nv, mr = best
    # the transforms' vectors: half as wide where a row of tiles fills at most half a 64-byte vector (they run
    # one row of tiles at a time: W4's 24-wide layers at F(4x4, 3x3) have rows of 6 tiles, 6 lanes of 16 in use)
    tvw = vw // 2 if vector_bytes() == 64 and tw <= vw // 2 else vw
    return {"VW": vw, "R": r, "TW": tw, "TH": th, "TS": ts, "TSP": ts + vw, "NV": nv, "MR": mr, "TVW": tvw}


def _slabs(ctype: str, w: dict) -> tuple[str, str, str]:
    """C expressions of the distance between two positions' slabs of the block's transformed input (``VS``) and of
    its products (``MS``), and of a thread's scratch (``per``: all of both, plus slack). The slabs lie one cache
    line more than their size apart: at 4 KiB multiples (W4's input gradient: 64 channels x 96 = 24 KiB) the
    transform's 16 stores and the output transform's 16 loads all fell into one L1 set."""
    pad = 64 // (4 if ctype == "float" else 8)
    npos = (w["E"] + 2) ** 2
    vs, ms = f"({w['CH']}LL * {w['TSP']}LL + {pad})", f"(MB * {w['MR'] * w['TS']}LL + {pad})"
    return vs, ms, f"({npos}LL * {vs} + {npos}LL * {ms} + {2 * w['VW']} + 16)"


def wino_scratch(ctype: str, w: dict) -> str:
    """C expression of the scratch bytes past the copy: A interleaved, its transform, the channel offsets, and per
    thread the block's transformed input and products (``w``: :func:`wino_plan`'s)."""
    npos = (w["E"] + 2) ** 2
    per = _slabs(ctype, w)[2]
    return (f"(size_t)(MB * {w['MR']} * K + {npos}LL * MB * {w['MR']} * {w['CH']} + {per} * omp_get_max_threads() "
            f"+ 64) * sizeof({ctype}) + (size_t){w['CH']} * sizeof(long long) + 192")


def _shuffle(a: str, b: str, idx) -> str:
    return f"__builtin_shufflevector({a}, {b}, {', '.join(str(i) for i in idx)})"


def wino_tiles(name: str, ctype: str, mr: int, nv_max: int, vw: int) -> str:
    """C of the register tiles ``name_t1 .. name_t<nv_max>``: ``o[i][v] = sum_c u[c][i] * v[c][v]`` for ``MR``
    rows ``i`` (``u`` interleaved by ``MR``) and ``nv`` vectors ``v`` (rows ``ldv`` apart), stored ``ldo``
    apart."""
    out = []
    for nv in range(1, nv_max + 1):
        out += [
            f"static __attribute__((noinline)) void {name}_t{nv}(long long ch, const {ctype} *restrict u, "
            f"const {ctype} *restrict v, long long ldv, {ctype} *restrict o, long long ldo) {{",
            f"    typedef {ctype} vT __attribute__((vector_size({vw * (4 if ctype == 'float' else 8)}), "
            f"aligned({4 if ctype == 'float' else 8})));",
            f"    vT acc[{mr}][{nv}];",
            f"    for (int i = 0; i < {mr}; i++)",
            f"        for (int j = 0; j < {nv}; j++) acc[i][j] = (vT){{0}};",
            "    for (long long c = 0; c < ch; c++) {",
            f"        vT b[{nv}];",
            f"        for (int j = 0; j < {nv}; j++) b[j] = *(const vT *)(v + c * ldv + j * {vw});",
            f"        for (int i = 0; i < {mr}; i++) {{",
            f"            const {ctype} a = u[c * {mr} + i];",
            f"            for (int j = 0; j < {nv}; j++) acc[i][j] += a * b[j];",
            "        }",
            "    }",
            f"    for (int i = 0; i < {mr}; i++)",
            f"        for (int j = 0; j < {nv}; j++) *(vT *)(o + i * ldo + j * {vw}) = acc[i][j];",
            "}", ""]
    return "\n".join(out)


# F(m x m, 3 x 3) (Lavin & Gray, 2015), m = 2 or 4: B^T (p x p), G (p x 3) and A^T (m x p), p = m + 2
TRANSFORMS = {
    2: ([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]]),
    4: ([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0],
         [0, 4, 0, -5, 0, 1]],
        [[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
         [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]],
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]),
}


def _lin(coeffs, names, ctype: str) -> str:
    """C of ``sum_j coeffs[j] * names[j]`` (zero terms left out; ``0`` when all are)."""
    out = ""
    for c, n in zip(coeffs, names):
        if c == 0:
            continue
        mag = abs(c)
        term = n if mag == 1 else f"({ctype}){mag!r} * {n}"
        out += (" - " if c < 0 else " + ") + term if out else ("-" if c < 0 else "") + term
    return out or f"({ctype})0"


def _pick(want, *sources) -> tuple[str, str, list[int]]:
    """The two-source shuffle giving a vector whose lanes hold the elements ``want`` (any labels), from two of
    ``sources`` (``(name, labels of its lanes)``): ``(a, b, indices)``."""
    for a, la in sources:
        for b, lb in sources:
            if all(x in la or x in lb for x in want):
                return a, b, [la.index(x) if x in la else len(la) + lb.index(x) for x in want]
    raise AssertionError(f"no two sources hold {want}")


def _shuffle_round(src: list, rnd: int, interleave: bool, prefix: str, sp: str, vt: str, lines: list) -> list:
    """One round of two-source shuffles over ``src`` (``(name, labels of its lanes)``): the vectors whose first
    labels agree mod ``2^rnd`` are paired in order, and each pair's labels (sorted) are cut into two vectors: the
    even and odd positions (a split), or the low and high halves (``interleave``: the split undone). Appends the C
    to ``lines`` and returns the new vectors."""
    groups: dict = {}
    for vec in src:
        groups.setdefault(vec[1][0] % (1 << rnd), []).append(vec)
    out = []
    for key in sorted(groups):
        grp = sorted(groups[key], key=lambda v: v[1][0])
        for k in range(0, len(grp), 2):
            pair = grp[k:k + 2]
            labels = sorted(pair[0][1] + pair[1][1])
            n = len(pair[0][1])
            for half in (0, 1):
                want = labels[half * n:(half + 1) * n] if interleave else labels[half::2]
                a, b, idx = _pick(want, *pair)
                nm = f"{prefix}{rnd}_{key}_{k}_{half}"
                lines.append(f"{sp}const {vt} {nm} = {_shuffle(a, b, idx)};")
                out.append((nm, want))
    return out


def _split_rows(e: int, vw: int, sp: str, vt: str) -> list[str]:
    """C (shuffle branch) setting ``x[j]`` (j < e + 2), lane l = ``p[e * l + j]``, from ``e + 1`` vector loads at
    ``p``: even / odd splits (log2(e) rounds), the last two phases shifted by one lane from the next vector."""
    lines = [f"{sp}const {vt} " + ", ".join(f"a{k} = *(const {vt} *)(p + {k * vw})" for k in range(e + 1)) + ";"]
    src = [(f"a{k}", [k * vw + lane for lane in range(vw)]) for k in range(e)]
    for rnd in range(e.bit_length() - 1):
        src = _shuffle_round(src, rnd, False, "s", sp, vt, lines)
    phases = {labels[0]: (nm, labels) for nm, labels in src}
    last = ("a" + str(e), [e * vw + lane for lane in range(vw)])
    for j in range(e):
        lines.append(f"{sp}x[{j}] = {phases[j][0]};")
    for j in (e, e + 1):
        a, b, idx = _pick([e * lane + j for lane in range(vw)], phases[j - e], last)
        lines.append(f"{sp}x[{j}] = {_shuffle(a, b, idx)};")
    return lines


def _merge_out(e: int, vw: int, sp: str, vt: str) -> list[str]:
    """C (shuffle branch) setting ``out[k]`` (k < e), lane l = column ``k * vw + l`` of a row of tiles, from
    ``y[b]`` (lane t = column ``e * t + b``): :func:`_split_rows`'s rounds undone, last first."""
    src = [(f"y[{b}]", [e * t + b for t in range(vw)]) for b in range(e)]
    lines: list = []
    for rnd in reversed(range(e.bit_length() - 1)):
        src = _shuffle_round(src, rnd, True, "z", sp, vt, lines)
    src = sorted(src, key=lambda v: v[1][0])
    if [lab for _, lab in src] != [list(range(k * vw, (k + 1) * vw)) for k in range(e)]:
        raise AssertionError("output interleave: unexpected lanes")
    return lines + [f"{sp}out[{k}] = {nm};" for k, (nm, _) in enumerate(src)]


def wino_loops(name: str, part, ctype: str, base: str, w: dict, rsp_h: str, m: int, fused_a: bool) -> list[str]:
    """C of the Winograd kernel's body after the padded copy ``xp`` is made (see the module docstring):
    ``part(role, var)`` gives the copy's offset of GEMM index ``var``'s axes of ``role``, ``base`` the offset where
    every index is 0, ``rsp_h`` the copy's stride along the rows' axis, ``m`` the output channels (A's rows)."""
    from .gemm_direct_loops import _EPI, interleave_a

    vw, mr, nv, r_, tw, th, ts, tsp = (w[k] for k in ("VW", "MR", "NV", "R", "TW", "TH", "TS", "TSP"))
    ch, oh, ow, e, tv = w["CH"], w["OH"], w["OW"], w["E"], w["TVW"]
    pp, npos = e + 2, (e + 2) ** 2
    bt, gm, at = TRANSFORMS[e]
    size = 4 if ctype == "float" else 8
    vs, ms, per = _slabs(ctype, w)
    sp = " " * 24
    xs = [f"x[{j}]" for j in range(pp)]
    inp = [
        f"{sp}tT t[{pp}][{pp}];",
        f"{sp}for (int i = 0; i < {pp}; i++) {{",
        f"{sp}    const {ctype} *p = s + i * RS + {e} * t0;",
        f"{sp}    tT x[{pp}];",
        SHUFFLES,
        *_split_rows(e, tv, sp + "    ", "tT"),
        "#else",
        f"{sp}    for (int l = 0; l < {tv}; l++)",
        f"{sp}        for (int j = 0; j < {pp}; j++) x[j][l] = p[{e} * l + j];",
        "#endif",
        *[f"{sp}    t[i][{k}] = {_lin(bt[k], xs, ctype)};" for k in range(pp)],
        f"{sp}}}",
        f"{sp}for (int j = 0; j < {pp}; j++) {{",
        *[f"{sp}    *(tT *)(d + ({k * pp} + j) * VS + t0) = {_lin(bt[k], [f't[{i}][j]' for i in range(pp)], ctype)};"
          for k in range(pp)],
        f"{sp}}}"]
    sp8 = " " * 28
    avx512 = tv * size in (32, 64)  # (masked stores: AVX-512, and AVX-512VL for 32 bytes)
    v = f"v{tv}{'sf' if ctype == 'float' else 'df'}"
    mt = "unsigned short" if tv == 16 else "unsigned char"
    st = f"__builtin_ia32_storeup{'s' if ctype == 'float' else 'd'}{tv * size * 8}_mask"
    store = [  # (a partial run of vectors: with AVX-512 masked stores; memcpy through the stack cost 10 %)
        f"{sp8}if (cnt == {e * tv}) {{ " + " ".join(f"*(tT *)(q + {k * tv}) = out[{k}];" for k in range(e)) + " }",
        f"{sp8}else {{",
        *([MASKED + (" && defined(__AVX512VL__)" if tv * size == 32 else ""),
           f"{sp8}    typedef {ctype} {v} __attribute__((vector_size({tv * size})));",
           f"{sp8}    for (int k = 0; k < {e}; k++) {{",
           f"{sp8}        const long long nk = cnt - k * {tv};",
           f"{sp8}        if (nk >= {tv}) *(tT *)(q + k * {tv}) = out[k];",
           f"{sp8}        else if (nk > 0) {st}(q + k * {tv}, ({v})out[k], ({mt})((1u << nk) - 1));",
           f"{sp8}    }}",
           "#else"] if avx512 else []),
        f"{sp8}    {ctype} tmp[{e * tv}];",
        f"{sp8}    for (int k = 0; k < {e}; k++) *(tT *)(tmp + k * {tv}) = out[k];",
        f"{sp8}    memcpy(q, tmp, (size_t)cnt * sizeof({ctype}));",
        *(["#endif"] if avx512 else []),
        f"{sp8}}}"]
    gemm = [f"{sp}int v0 = 0;",
            f"{sp}for (; v0 + {nv} <= nvt; v0 += {nv}) {name}_t{nv}({ch}, u, v + v0 * {vw}, {tsp}, "
            f"o + v0 * {vw}, {ts});"]
    if nv > 1:
        gemm += [f"{sp}switch (nvt - v0) {{"] + [
            f"{sp}case {k}: {name}_t{k}({ch}, u, v + v0 * {vw}, {tsp}, o + v0 * {vw}, {ts}); break;"
            for k in range(1, nv)] + [f"{sp}default: break;", f"{sp}}}"]
    wt = [  # U = G g G^T for one (output, input) channel pair: q = G g, then the rows of q G^T
        f"                {ctype} q[{pp}][3];",
        "                for (int v = 0; v < 3; v++) {",
        f"                    const {ctype} g[3] = {{s[v * {mr}], s[(3 + v) * {mr}], s[(6 + v) * {mr}]}};",
        *[f"                    q[{a}][v] = {_lin(gm[a], ['g[0]', 'g[1]', 'g[2]'], ctype)};" for a in range(pp)],
        "                }",
        f"                const long long xs = MB * {ch} * {mr};  /* (one position xi to the next) */",
        f"                for (int a = 0; a < {pp}; a++) {{",
        f"                    {ctype} *dst = U + ((a * {pp}LL * MB + mb) * {ch} + c) * {mr} + i;",
        *[f"                    dst[{b} * xs] = {_lin(gm[b], [f'q[a][{v}]' for v in range(3)], ctype)};"
          for b in range(pp)],
        "                }"]
    mm = [f"c[{i}]" for i in range(pp)]
    outt = [  # Y = A^T M A: rows of A^T M (a column of M at a time), then each output row's columns
        f"                        tT s0[{e}][{pp}], y[{e}], out[{e}];",
        f"                        for (int j = 0; j < {pp}; j++) {{",
        f"                            tT c[{pp}];",
        f"                            for (int i = 0; i < {pp}; i++) c[i] = *(const tT *)(mp + (i * {pp} + j) * MS);",
        *[f"                            s0[{a}][j] = {_lin(at[a], mm, ctype)};" for a in range(e)],
        "                        }"]
    return [
        f"    /* Winograd F({e}x{e}, 3x3): {ch} -> {m} channels, {oh} x {ow} outputs, blocks of {r_} x {tw} tiles */",
        f"    const long long RS = {rsp_h}, VS = {vs}, MS = {ms};  /* (slabs: _slabs) */",
        f"    typedef {ctype} tT __attribute__((vector_size({tv * size}), aligned({size})));  /* (the transforms') */",
        f"    {ctype} *restrict ap = ({ctype} *)rest;",
        f"    {ctype} *restrict U = ap + MB * {mr} * K;",
        f"    long long *restrict coff = (long long *)(U + {npos}LL * MB * {mr} * {ch});",
        f"    {ctype} *restrict wsp = ({ctype} *)(((uintptr_t)(coff + {ch}) + 63) & ~(uintptr_t)63);",
        f"    const long long per = {per};",
        f"    for (long long c = 0; c < {ch}; c++) coff[c] = {part('k', '(c * 9LL)')};",
        *interleave_a(ctype, mr, 1, "0", fused_a),
        "    #pragma omp parallel for collapse(2) schedule(static) if(par)",
        "    for (long long mb = 0; mb < MB; mb++)",
        f"        for (long long c = 0; c < {ch}; c++)",
        f"            for (int i = 0; i < {mr}; i++) {{  /* U = G g G^T */",
        f"                const {ctype} *s = ap + (mb * K + c * 9) * {mr} + i;",
        *wt,
        "            }",
        f"    const long long G = N / {oh * ow}LL * {th}LL, NBK = (G + {r_ - 1}) / {r_};  /* rows of tiles, blocks */",
        "    #pragma omp parallel if(par)",
        "    {",
        f"        {ctype} *restrict V = wsp + (long long)omp_get_thread_num() * per;",
        f"        {ctype} *restrict Mo = V + {npos}LL * VS;",
        "        int terr = 0;",
        "        #pragma omp for schedule(static)",
        "        for (long long blk = 0; blk < NBK; blk++) {",
        f"            const long long g0 = blk * {r_}, nr = G - g0 < {r_} ? G - g0 : {r_};",
        f"            const int nvt = (int)((nr * {tw} + {vw - 1}) / {vw});",
        f"            long long roff[{r_}];",
        "            for (long long r = 0; r < nr; r++) {",
        f"                const long long g = g0 + r, n0 = g / {th}LL * {oh * ow}LL + g % {th}LL * {e * ow}LL;",
        f"                roff[r] = {base} + {part('row', 'n0')};",
        "            }",
        f"            for (long long c = 0; c < {ch}; c++) {{  /* V = B^T d B, a channel's rows of tiles in turn */",
        "                for (long long r = 0; r < nr; r++) {  /* (consecutive rows of the copy; a row's last",
        "                    vector spills into the next row's first tiles, stored after it) */",
        f"                    const {ctype} *s = xp + roff[r] + coff[c];",
        f"                    if (c + 1 < {ch})  /* (prefetch the next channel's patch rows: W4's input gradient",
        "                        5.06 -> 4.55 ms, its forward 3.00 -> 2.83) */",
        f"                        for (int i = 0; i < {e + 2}; i++)",
        f"                            for (int q = 0; q < {e * tw + 2}; q += {64 // size}) "
        "__builtin_prefetch(xp + roff[r] + coff[c + 1] + i * RS + q);",
        f"                    {ctype} *d = V + c * {tsp}LL + r * {tw}LL;",
        f"                    for (long long t0 = 0; t0 < {tw}; t0 += {tv}) {{",
        *inp,
        "                    }",
        "                }",
        "            }",
        f"            for (int xi = 0; xi < {npos}; xi++)  /* the products, MR rows of U at a time (V_xi in L1) */",
        "                for (long long mb = 0; mb < MB; mb++) {",
        f"                    const {ctype} *u = U + ((xi * MB + mb) * {ch}) * {mr};",
        f"                    const {ctype} *v = V + xi * VS;",
        f"                    {ctype} *o = Mo + xi * MS + mb * {mr * ts}LL;",
        *gemm,
        "                }",
        "            for (long long m = 0; m < M; m++) {  /* Y = A^T M A */",
        f"                {ctype} *crow = C + m * N;",
        "                for (long long r = 0; r < nr; r++) {",
        f"                    const long long g = g0 + r, h0 = g % {th}LL * {e};",
        f"                    {ctype} *q0 = crow + g / {th}LL * {oh * ow}LL + h0 * {ow}LL;",
        f"                    for (long long t0 = 0; t0 < {tw}; t0 += {tv}) {{",
        f"                        const {ctype} *mp = Mo + m * {ts}LL + r * {tw}LL + t0;",
        *outt,
        f"                        const long long cnt = {ow}LL - {e} * t0 < {e * tv} ? {ow}LL - {e} * t0 : {e * tv};",
        f"                        for (int h = 0; h < {e}; h++) {{",
        f"                            if (h0 + h >= {oh}) break;",
        f"                            {ctype} *q = q0 + h * {ow}LL + {e} * t0;",
        *[f"                            y[{b}] = {_lin(at[b], [f's0[h][{j}]' for j in range(pp)], ctype)};"
          for b in range(e)],
        SHUFFLES,
        *_merge_out(e, tv, " " * 28, "tT"),
        "#else",
        f"                            for (int n = 0; n < {e * tv}; n++)",
        f"                                out[n / {tv}][n % {tv}] = y[n % {e}][n / {e}];",
        "#endif",
        *store,
        "                        }",
        "                    }",
        "                }",
        "            }",
        "            if (epi) {",
        f"                const long long gl = g0 + nr - 1, hl = gl % {th}LL * {e} + {e};",
        f"                const long long n_lo = g0 / {th}LL * {oh * ow}LL + g0 % {th}LL * {e * ow}LL;",
        f"                const long long n_hi = gl / {th}LL * {oh * ow}LL + (hl < {oh} ? hl : {oh}) * {ow}LL;",
        "                int e = epi(bufs, syms, 0, M, n_lo, n_hi);",
        "                if (e && !terr) terr = e;",
        "            }",
        "        }",
        *_EPI,
        "    }",
    ]
