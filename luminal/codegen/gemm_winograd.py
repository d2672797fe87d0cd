"""Winograd F(2x2, 3x3): a 3x3, stride-1 convolution in 16 multiply-adds per 2 x 2 outputs and input channel
instead of 36.

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

The kernel (:func:`wino_loops`): A is interleaved by ``MR`` rows (through its prologue's pack callback where it
has one) and transformed once per call; the tiles are taken a *block* of ``R`` rows of tiles at a time
(:func:`wino_geometry`: whole vectors of tiles where it can, the block's 16 transformed channels ``V`` and 16
products at most 512 KiB each), each thread a share of the blocks: the input transform vectorized along a row of
tiles (each vector of 16 tiles reads two 2-vector runs per patch row, split into their even and odd lanes by
shuffles), a channel's rows of tiles in turn (consecutive rows of the copy), packed one after the other so no lane
idles past a short row; then, position by position (its ``V_xi`` in L1), the products of all output channels as
register tiles of ``MR x NV`` vectors of tiles (the sum over the channels in registers); then the output transform
along the same vectors, its two columns interleaved back into rows of C (the partial last pair by one masked
store); the epilogue on the block's outputs. The 16 positions' slabs of ``V`` and of the products lie one cache
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

MIN_CHANNELS = 16  # input and output channels from which it is taken (below, the transforms cost the saving)
# tiles (at the least batch) from which it is taken: fewer (a ResNet's 14 x 14 and 7 x 7 stages at batch 1) give
# too few blocks to share out over the threads, and the transformed weights (16/9 of the weights) dominate
MIN_TILES = 192
V_BYTES = 512 * 1024  # the block's transformed input (16 x channels x tiles) at most this (one vector of tiles)
MO_BYTES = 512 * 1024  # the block's 16 products (16 x output channels x tiles) at most this (one vector of tiles)
MAX_VECTORS = 8  # tiles per block at most this many vectors
# the register tile's relative speed by its vectors of tiles (with the most rows :data:`.gemm_stream.TILES` has; with
# fewer, times the square root of their share), measured on W4's layers (2 cores Zen 4, min of alternating runs):
# 64 outputs 6 x 4 4.8 ms, 8 x 3 5.2, 12 x 2 5.3, 4 x 4 5.9; 32 outputs (6 x 4 computes 36 rows) 8 x 3 as fast
TILE_EFFICIENCY = {4: 1.0, 3: 0.9, 2: 0.87, 1: 0.75}
# the guards of the shuffles (GCC 12+ / clang) and of AVX-512's masked loads and stores (GCC's builtins); built with
# -DLM_WINO_PORTABLE the kernels take their portable branches instead (tests/test_winograd.py builds them so)
SHUFFLES = "#if (defined(__clang__) || __GNUC__ >= 12) && !defined(LM_WINO_PORTABLE)  /* (__builtin_shufflevector) */"
MASKED = "#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__) && !defined(LM_WINO_PORTABLE)"


def wino_plan(pro, m, k_total, n_least, kdims, steps, last, itemsize) -> dict | None:
    """The Winograd geometry of a GEMM of ``m`` rows (constant), ``k_total`` (K; None where symbolic) and at least
    ``n_least`` columns (N at its least binding: a batch of 1) whose B operand is the window prologue ``pro``
    (``kdims`` its kernel's extents, ``steps[d] = (axis, step)`` of its moving axes, ``last`` the copy's innermost
    axis), or None where it does not apply: ``{"kw", "kh", "ow", "oh"}`` (prologue axes), ``"H"`` (the copy axis of
    rows), ``OH``, ``OW``, ``CH`` (input channels), ``M`` (output channels) and the kernel's geometry for elements
    of ``itemsize`` bytes (:func:`wino_geometry`)."""
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
    w = {"kw": kw, "kh": kh, "ow": ow, "oh": oh, "H": H, "OH": OH, "OW": OW, "CH": k_total // 9, "M": m}
    return {**w, **wino_geometry(w, itemsize)}


def wino_geometry(w: dict, itemsize: int) -> dict:
    """Vector width ``VW``, rows of tiles per block ``R``, tiles per row ``TW`` / column ``TH``, the block's vector
    columns ``TS`` (and ``TSP``: a row of the transformed input, with room for a row's last vector), ``MR`` and
    ``NV`` (the register tile) for the geometry ``w`` of :func:`wino_plan` (``w["M"]`` output channels): the
    least estimated time, the products computed past the tiles and channels there are (lanes past a block's
    tiles, rows past the last channel) over the register tile's efficiency (:data:`TILE_EFFICIENCY`), the larger
    block among equals."""
    vw = vector_bytes() // itemsize
    tiles = TILES[vector_bytes()]
    tw, th, m = -(-w["OW"] // 2), -(-w["OH"] // 2), w["M"]
    cap = max(1, min(MAX_VECTORS, V_BYTES // (16 * w["CH"] * itemsize * vw), MO_BYTES // (16 * m * itemsize * vw)))
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
    return {"VW": vw, "R": r, "TW": tw, "TH": th, "TS": ts, "TSP": ts + vw, "NV": nv, "MR": mr}


def wino_scratch(ctype: str, w: dict) -> str:
    """C expression of the scratch bytes past the copy: A interleaved, its transform, the channel offsets, and per
    thread the block's transformed input and products (``w``: :func:`wino_plan`'s)."""
    pad = 64 // (4 if ctype == "float" else 8)
    per = (f"(16LL * ({w['CH']} * {w['TSP']} + {pad}) + 16LL * (MB * {w['MR']} * {w['TS']} + {pad}) + {2 * w['VW']}"
           " + 16)")
    return (f"(size_t)(MB * {w['MR']} * K + 16LL * MB * {w['MR']} * {w['CH']} + {per} * omp_get_max_threads() "
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


def wino_loops(name: str, part, ctype: str, base: str, w: dict, rsp_h: str, m: int, fused_a: bool) -> list[str]:
    """C of the Winograd kernel's body after the padded copy ``xp`` is made (see the module docstring):
    ``part(role, var)`` gives the copy's offset of GEMM index ``var``'s axes of ``role``, ``base`` the offset where
    every index is 0, ``rsp_h`` the copy's stride along the rows' axis, ``m`` the output channels (A's rows)."""
    from .gemm_direct_loops import _EPI, interleave_a

    vw, mr, nv, r_, tw, th, ts, tsp = (w[k] for k in ("VW", "MR", "NV", "R", "TW", "TH", "TS", "TSP"))
    ch, oh, ow = w["CH"], w["OH"], w["OW"]
    pad = 64 // (4 if ctype == "float" else 8)  # (see VS below)
    ev = [2 * i for i in range(vw)]
    od = [2 * i + 1 for i in range(vw)]
    lo = [i // 2 + vw * (i % 2) for i in range(vw)]
    hi = [vw // 2 + i // 2 + vw * (i % 2) for i in range(vw)]
    split = []
    for j, (a, b, idx) in enumerate((("a0", "a1", ev), ("a0", "a1", od), ("e0", "e1", ev), ("e0", "e1", od))):
        split.append(f"x[i][{j}] = {_shuffle(a, b, idx)};")
    gather = [f"for (int l = 0; l < {vw}; l++) {{ x[i][0][l] = p[2 * l]; x[i][1][l] = p[2 * l + 1]; "
              "x[i][2][l] = p[2 * l + 2]; x[i][3][l] = p[2 * l + 3]; }"]
    sp = " " * 24
    inp = [
        f"{sp}vT x[4][4], t[4][4];",
        f"{sp}for (int i = 0; i < 4; i++) {{",
        f"{sp}    const {ctype} *p = s + i * RS + 2 * t0;",
        SHUFFLES,
        f"{sp}    const vT a0 = *(const vT *)p, a1 = *(const vT *)(p + {vw}), e0 = *(const vT *)(p + 2), "
        f"e1 = *(const vT *)(p + {vw + 2});",
        *[f"{sp}    {x}" for x in split],
        "#else",
        *[f"{sp}    {x}" for x in gather],
        "#endif",
        f"{sp}    t[i][0] = x[i][0] - x[i][2]; t[i][1] = x[i][1] + x[i][2];",
        f"{sp}    t[i][2] = x[i][2] - x[i][1]; t[i][3] = x[i][1] - x[i][3];",
        f"{sp}}}",
        f"{sp}for (int j = 0; j < 4; j++) {{",
        f"{sp}    *(vT *)(d + (0 + j) * VS + t0) = t[0][j] - t[2][j];",
        f"{sp}    *(vT *)(d + (4 + j) * VS + t0) = t[1][j] + t[2][j];",
        f"{sp}    *(vT *)(d + (8 + j) * VS + t0) = t[2][j] - t[1][j];",
        f"{sp}    *(vT *)(d + (12 + j) * VS + t0) = t[1][j] - t[3][j];",
        f"{sp}}}"]
    sp8 = " " * 28
    avx512 = vw * (4 if ctype == "float" else 8) == 64
    v, mt, st = ("v16sf", "unsigned short", "__builtin_ia32_storeups512_mask") if ctype == "float" else \
        ("v8df", "unsigned char", "__builtin_ia32_storeupd512_mask")
    store = [  # (a partial pair of vectors: with AVX-512 one masked store; memcpy through the stack cost 10 %)
        f"{sp8}if (cnt == {2 * vw}) {{ *(vT *)q = lo; *(vT *)(q + {vw}) = hi; }}",
        f"{sp8}else {{",
        *([MASKED,
           f"{sp8}    typedef {ctype} {v} __attribute__((vector_size(64)));",
           f"{sp8}    if (cnt >= {vw}) {{ *(vT *)q = lo; {st}(q + {vw}, ({v})hi, ({mt})((1u << (cnt - {vw})) - 1)); }}",
           f"{sp8}    else {st}(q, ({v})lo, ({mt})((1u << cnt) - 1));",
           "#else"] if avx512 else []),
        f"{sp8}    {ctype} tmp[{2 * vw}]; *(vT *)tmp = lo; *(vT *)(tmp + {vw}) = hi;",
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
    return [
        f"    /* Winograd F(2x2, 3x3): {ch} -> {m} channels, {oh} x {ow} outputs, blocks of {r_} x {tw} tiles */",
        # (the 16 positions' slabs one cache line more than a multiple of their size apart: at 4 KiB multiples
        # (W4's input gradient: 64 channels x 96 = 24 KiB) the transform's 16 stores and the output transform's 16
        # loads all fell into one L1 set)
        f"    const long long RS = {rsp_h}, VS = {ch}LL * {tsp}LL + {pad}, MS = MB * {mr * ts}LL + {pad};",
        f"    {ctype} *restrict ap = ({ctype} *)rest;",
        f"    {ctype} *restrict U = ap + MB * {mr} * K;",
        f"    long long *restrict coff = (long long *)(U + 16LL * MB * {mr} * {ch});",
        f"    {ctype} *restrict wsp = ({ctype} *)(((uintptr_t)(coff + {ch}) + 63) & ~(uintptr_t)63);",
        f"    const long long per = 16LL * VS + 16LL * MS + {2 * vw} + 16;",
        f"    for (long long c = 0; c < {ch}; c++) coff[c] = {part('k', '(c * 9LL)')};",
        *interleave_a(ctype, mr, 1, "0", fused_a),
        "    #pragma omp parallel for collapse(2) schedule(static) if(par)",
        "    for (long long mb = 0; mb < MB; mb++)",
        f"        for (long long c = 0; c < {ch}; c++)",
        f"            for (int i = 0; i < {mr}; i++) {{  /* U = G g G^T */",
        f"                const {ctype} *s = ap + (mb * K + c * 9) * {mr} + i;",
        f"                {ctype} q[4][3];",
        "                for (int v = 0; v < 3; v++) {",
        f"                    const {ctype} g0 = s[v * {mr}], g1 = s[(3 + v) * {mr}], g2 = s[(6 + v) * {mr}];",
        f"                    q[0][v] = g0; q[1][v] = ({ctype})0.5 * (g0 + g1 + g2);",
        f"                    q[2][v] = ({ctype})0.5 * (g0 - g1 + g2); q[3][v] = g2;",
        "                }",
        "                for (int a = 0; a < 4; a++) {",
        f"                    {ctype} *dst = U + ((a * 4LL * MB + mb) * {ch} + c) * {mr} + i;",
        f"                    const long long xs = MB * {ch} * {mr};  /* (one position xi to the next) */",
        f"                    dst[0] = q[a][0]; dst[xs] = ({ctype})0.5 * (q[a][0] + q[a][1] + q[a][2]);",
        f"                    dst[2 * xs] = ({ctype})0.5 * (q[a][0] - q[a][1] + q[a][2]); dst[3 * xs] = q[a][2];",
        "                }",
        "            }",
        f"    const long long G = N / {oh * ow}LL * {th}LL, NBK = (G + {r_ - 1}) / {r_};  /* rows of tiles, blocks */",
        "    #pragma omp parallel if(par)",
        "    {",
        f"        {ctype} *restrict V = wsp + (long long)omp_get_thread_num() * per;",
        f"        {ctype} *restrict Mo = V + 16LL * VS;",
        "        int terr = 0;",
        "        #pragma omp for schedule(static)",
        "        for (long long blk = 0; blk < NBK; blk++) {",
        f"            const long long g0 = blk * {r_}, nr = G - g0 < {r_} ? G - g0 : {r_};",
        f"            const int nvt = (int)((nr * {tw} + {vw - 1}) / {vw});",
        f"            long long roff[{r_}];",
        "            for (long long r = 0; r < nr; r++) {",
        f"                const long long g = g0 + r, n0 = g / {th}LL * {oh * ow}LL + g % {th}LL * {2 * ow}LL;",
        f"                roff[r] = {base} + {part('row', 'n0')};",
        "            }",
        f"            for (long long c = 0; c < {ch}; c++) {{  /* V = B^T d B, a channel's rows of tiles in turn */",
        "                for (long long r = 0; r < nr; r++) {  /* (consecutive rows of the copy; a row's last",
        "                    vector spills into the next row's first tiles, stored after it) */",
        f"                    const {ctype} *s = xp + roff[r] + coff[c];",
        f"                    {ctype} *d = V + c * {tsp}LL + r * {tw}LL;",
        f"                    for (long long t0 = 0; t0 < {tw}; t0 += {vw}) {{",
        *inp,
        "                    }",
        "                }",
        "            }",
        "            for (int xi = 0; xi < 16; xi++)  /* the 16 products, MR rows of U at a time (V_xi in L1) */",
        "                for (long long mb = 0; mb < MB; mb++) {",
        f"                    const {ctype} *u = U + ((xi * MB + mb) * {ch}) * {mr};",
        f"                    const {ctype} *v = V + xi * VS;",
        f"                    {ctype} *o = Mo + xi * MS + mb * {mr * ts}LL;",
        *gemm,
        "                }",
        "            for (long long m = 0; m < M; m++) {  /* Y = A^T M A */",
        f"                {ctype} *crow = C + m * N;",
        "                for (long long r = 0; r < nr; r++) {",
        f"                    const long long g = g0 + r, h0 = g % {th}LL * 2;",
        f"                    {ctype} *q0 = crow + g / {th}LL * {oh * ow}LL + h0 * {ow}LL;",
        f"                    for (long long t0 = 0; t0 < {tw}; t0 += {vw}) {{",
        f"                        const {ctype} *mp = Mo + m * {ts}LL + r * {tw}LL + t0;",
        "                        vT mm[16], s0[4], s1[4];",
        "                        for (int x = 0; x < 16; x++) mm[x] = *(const vT *)(mp + x * MS);",
        "                        for (int j = 0; j < 4; j++) {",
        "                            s0[j] = mm[j] + mm[4 + j] + mm[8 + j];",
        "                            s1[j] = mm[4 + j] - mm[8 + j] - mm[12 + j];",
        "                        }",
        "                        const vT y00 = s0[0] + s0[1] + s0[2], y01 = s0[1] - s0[2] - s0[3];",
        "                        const vT y10 = s1[0] + s1[1] + s1[2], y11 = s1[1] - s1[2] - s1[3];",
        f"                        const long long cnt = {ow}LL - 2 * t0 < {2 * vw} ? {ow}LL - 2 * t0 : {2 * vw};",
        "                        for (int h = 0; h < 2; h++) {",
        f"                            if (h0 + h >= {oh}) break;",
        f"                            {ctype} *q = q0 + h * {ow}LL + 2 * t0;",
        "                            const vT ya = h ? y10 : y00, yb = h ? y11 : y01;",
        SHUFFLES,
        f"                            const vT lo = {_shuffle('ya', 'yb', lo)}, hi = {_shuffle('ya', 'yb', hi)};",
        "#else",
        "                            vT lo, hi;",
        f"                            for (int l = 0; l < {vw}; l++) {{",
        "                                lo[l] = l & 1 ? yb[l / 2] : ya[l / 2];",
        f"                                hi[l] = l & 1 ? yb[{vw // 2} + l / 2] : ya[{vw // 2} + l / 2];",
        "                            }",
        "#endif",
        *store,
        "                        }",
        "                    }",
        "                }",
        "            }",
        "            if (epi) {",
        f"                const long long gl = g0 + nr - 1, hl = gl % {th}LL * 2 + 2;",
        f"                const long long n_lo = g0 / {th}LL * {oh * ow}LL + g0 % {th}LL * {2 * ow}LL;",
        f"                const long long n_hi = gl / {th}LL * {oh * ow}LL + (hl < {oh} ? hl : {oh}) * {ow}LL;",
        "                int e = epi(bufs, syms, 0, M, n_lo, n_hi);",
        "                if (e && !terr) terr = e;",
        "            }",
        "        }",
        *_EPI,
        "    }",
    ]
