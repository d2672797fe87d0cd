"""Winograd F(3x3, 2x2) and F(3x3, 4x4): the weight gradient of a 3x3, stride-1 convolution in 16 multiply-adds per
2 x 2 output positions, output and input channel instead of 36, or 36 per 4 x 4 instead of 144.

A form of the direct convolution (:mod:`.gemm_direct`, ``mode="winodw"``): the GEMM ``C[m, j] = sum_k A[m, k]
B[k, j]`` of a 3x3 layer's weight gradient, A the output's gradient (``dY``: rows ``m``, contiguous along the
positions ``k = (outer, oh, ow)``), B the input's window view (``j = (c, kh, kw)``). Cut the positions into 2 x 2
tiles: each adds to the 3 x 3 kernel of ``(m, c)`` the correlation of the tile's 4 x 4 input patch ``d`` with its
2 x 2 chunk ``g`` of ``dY``, and (the transpose of F(2x2, 3x3), Lavin & Gray's trilinear form read the other way)

    Y = G^T [ (A' g A'^T) * (B^T d B) ] G,  A' = [[1, 0], [1, 1], [1, -1], [0, -1]],
    B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],  G^T = [[1, 1/2, 1/2, 0], [0, 1/2, -1/2, 0],
    [0, 1/2, 1/2, 1]]

summed over the tiles before the output transform: 16 products ``M_xi[m, c] = sum_t U_xi[m, t] V_xi[t, c]``.
F(3x3, 4x4) is the same with F(4x4, 3x3)'s matrices (:data:`.gemm_winograd.TRANSFORMS`: ``A'`` the transpose of its
4 x 6 ``A^T``, its 6 x 6 ``B^T`` and 6 x 3 ``G``): 4 x 4 chunks of ``dY``, 6 x 6 input patches, 36 products per 16
positions instead of 64 (:func:`wino_dw_tile`: by the forward's count rule, or the measured search's form). Its
float32 error against the float64 sum is ~5e-7 of the largest value (F(3x3, 2x2)'s ~2e-7) on W4's conv2.

The kernel (:func:`render_wino_dw`): the input is copied channels-last (register transposes of 16 channels x 16
columns), zero-padded to whole tiles (so ``V``
vectorizes along the channels: 16 aligned loads per tile and vector of channels, no shuffles); ``U`` vectorizes
along a row of tiles (each ``dY`` row split into its ``e`` phases (positions mod ``e``) by rounds of even / odd
shuffles, a row's end by masked loads: no lane reads past it); the threads share out blocks of rows of tiles
(about :data:`TILE_ROWS` tiles), each summing its blocks' products into its own ``16 x M x C`` (``36 x M x C``)
accumulators (register tiles of MR output channels x NV vectors of input channels,
the sum over the block's tiles in registers), then the threads' sums are added and transformed into C, and the
epilogue runs once. Taken (:func:`wino_dw_plan`) for 2-D layers with a plain ``dY`` from 16 input and output
channels and ``MIN_TILES`` tiles (at the least batch), float32 and float64, unless ``LUMINAL_WINOGRAD=0``.
"""

from __future__ import annotations

import os

from .gemm_config import vector_bytes
from .sizes import _c, _prod
from .gemm_stream import TILES
from .gemm_winograd import (MASKED, MIN_CHANNELS, MIN_TILES, SHUFFLES, TILE_EFFICIENCY, TRANSFORMS, _lin, _shuffle,
                             _shuffle_round, parse_form, wino_tile)

# the direct convolution's per-thread buffers (its copy, a thread's partial sums), inside the kernels' include guard
# LM_DIRECT_BUF; weak and hidden, freed by luminal_release (luminal.codegen.c_support.with_release)
DIRECT_BUF = """__attribute__((weak, visibility("hidden"))) __thread void *lm_dc_buf, *lm_dc_part;
__attribute__((weak, visibility("hidden"))) __thread size_t lm_dc_cap, lm_dc_pcap;
__attribute__((weak, visibility("hidden"))) void lm_release_dc(void) {
    free(lm_dc_buf); free(lm_dc_part); lm_dc_buf = lm_dc_part = NULL; lm_dc_cap = lm_dc_pcap = 0;
}
#endif
"""

# tiles per block (about), by positions per tile side: its U (P x M x tiles) and V (P x tiles x C, P the transformed
# positions: 16 or 36) stay in L2
TILE_ROWS = {2: 64, 4: 32}  # (F(3x3, 4x4), measured on four layers: 16 rows 5-10 % slower, 64 from 4 % faster to 18 %
# slower)


def wino_dw_plan(pro, m, n, k_least, kdims, steps, last, pads, origin, a_unit, tile=None) -> dict | None:
    """The geometry of the weight-gradient GEMM of ``m`` rows and ``n`` columns (constants; K at least
    ``k_least``) whose B operand is the window prologue ``pro`` (``kdims``, ``steps`` as in
    :func:`.gemm_winograd.wino_plan`; ``pads`` / ``origin`` of the copy's axes) and whose A is plain with unit
    stride along K (``a_unit``), or None: ``{"c", "b"}`` (the copy's channel and outer axes; ``b`` None without
    one), ``H``, ``W``, ``OH``, ``OW``, ``CH``, ``M`` and ``E``, the positions per tile side (:func:`wino_dw_tile`;
    ``tile``: ``GemmKernel.wino``, the measured search's choice)."""
    if os.environ.get("LUMINAL_WINOGRAD", "1") == "0" or pro.side != "b" or not a_unit:
        return None
    if not isinstance(m, int) or not isinstance(n, int) or m < MIN_CHANNELS:
        return None
    role = {}
    for d, e in enumerate(pro.axes):
        if e is not None and not (isinstance(kdims[d], int) and kdims[d] == 1):
            if e[0] not in ("k", "row") or not isinstance(e[1], int):
                return None
            role.setdefault(e, []).append(d)
    if any(len(ds) > 1 for ds in role.values()):
        return None
    one = {e: ds[0] for e, ds in role.items()}
    kw, kh, c, ow = (one.get(e) for e in (("row", 1), ("row", 3), ("row", 9), ("k", 1)))
    if None in (kw, kh, c, ow) or kdims[kw] != 3 or kdims[kh] != 3 or not isinstance(kdims[c], int):
        return None
    OW = kdims[ow]
    oh = one.get(("k", OW)) if isinstance(OW, int) else None
    if oh is None or not isinstance(kdims[oh], int):
        return None
    OH, CH = kdims[oh], kdims[c]
    b = one.get(("k", OH * OW))
    if len(one) != 5 + (b is not None) or CH < MIN_CHANNELS or n != 9 * CH:
        return None
    if any(d not in steps for d in (kw, kh, c, ow, oh)) or b is not None and b not in steps:
        return None
    H = steps[kh][0]
    if steps[kw] != (last, 1) or steps[ow] != (last, 1) or steps[kh] != (H, 1) or steps[oh] != (H, 1):
        return None
    ac, ab = steps[c], steps[b] if b is not None else None
    if ac[1] != 1 or ac[0] in (H, last) or ab is not None and (ab[1] != 1 or ab[0] in (H, last, ac[0])):
        return None
    others = [a for a in range(len(pads)) if a not in (H, last)]
    if any(pads[a] != (0, 0) or origin[a] != 0 for a in others):
        return None
    if (k_least or 0) // (OH * OW) * (-(-OH // 2)) * (-(-OW // 2)) < MIN_TILES:
        return None
    return {"kind": "dw", "c": ac[0], "b": None if ab is None else ab[0], "H": H, "W": last, "OH": OH, "OW": OW,
            "CH": CH, "M": m, "E": wino_dw_tile(OH, OW, (k_least or 0) // (OH * OW), CH, m, tile)}


def wino_dw_tile(oh: int, ow: int, images: int, ch: int, m: int, tile=None) -> int:
    """Positions per tile side: 4 (F(3x3, 4x4): 36 products per 16 positions and channel pair instead of 64) or 2
    (F(3x3, 2x2)), by the forward's rule (:func:`.gemm_winograd.wino_tile`: 4 from ``MIN_F4`` positions per side and
    enough 4 x 4 tiles, ``images`` at the least batch); ``tile`` (``GemmKernel.wino``, the measured search's
    choice: 2, 4, ``"2w"``, ``"4w"``) replaces the count rule; ``LUMINAL_WINOGRAD=2`` keeps 2.

    The count rule, measured (2 cores Zen 4, a layer's forward and weight gradient, min ms, F(3x3, 2x2) /
    F(3x3, 4x4)): W4's conv2 (64 images, 32 -> 64 channels, 24 x 24) 5.20 / 4.54, 64 channels on 56 x 56 at batch 8
    6.27 / 5.01, 128 on 28 x 28 at batch 8 5.76 / 5.03, 16 -> 32 on 32 x 32 at batch 32 1.80 / 1.71; but with few
    tiles per channel pair 128 on 28 x 28 at batch 1 (49 tiles) 0.81 / 1.05, 256 on 14 x 14 at batch 8 (128) 7.88
    / 12.35 (each block's 36 products of M x C accumulators, read and written per block, outweigh the saving)."""
    return wino_tile(oh, ow, images, ch, m, parse_form(tile)[0])


def dw_geometry(w: dict, itemsize: int) -> dict:
    """``VW``, tiles per row / column ``TW`` / ``TH``, rows of tiles per block ``R``, ``CP`` (channels padded to
    vectors), the register tile ``MR`` x ``NV`` (the least rows computed past M over its efficiency), ``MP``
    (M padded to MR), ``TSP`` (a row of U: the block's tiles and room for a row's last vector)."""
    vw = vector_bytes() // itemsize
    e = w["E"]
    tw, th, m = -(-w["OW"] // e), -(-w["OH"] // e), w["M"]
    cp = -(-w["CH"] // vw) * vw
    cpv = cp // vw
    tiles = TILES[vector_bytes()]
    best = None
    for nv in range(1, min(4, cpv) + 1):
        for mr in range(2, tiles[nv] + 1):
            eff = TILE_EFFICIENCY[nv] * (mr / tiles[nv]) ** 0.5
            cost = round(-(-m // mr) * mr / m * (-(-cpv // nv) * nv) / cpv / eff, 6)
            if best is None or cost < best[0]:
                best = (cost, nv, mr)
    _, nv, mr = best
    r = max(1, TILE_ROWS[e] // tw)
    return {"VW": vw, "TW": tw, "TH": th, "R": r, "CP": cp, "NV": nv, "MR": mr, "MP": -(-m // mr) * mr,
            "TSP": -(-(r * tw) // vw) * vw + vw}


def _tiles(name: str, ctype: str, mr: int, nv_max: int, vw: int) -> list[str]:
    """Register tiles ``name_d1 .. name_d<nv_max>``: ``o[i][j] += sum_t u[i][t] * v[t][j]`` (``u`` rows ``ldu``
    apart, ``v`` rows ``ldv`` apart, ``nv`` vectors each)."""
    size = 4 if ctype == "float" else 8
    out = []
    for nv in range(1, nv_max + 1):
        out += [
            f"static __attribute__((noinline)) void {name}_d{nv}(long long kt, const {ctype} *restrict u, "
            f"long long ldu, const {ctype} *restrict v, long long ldv, {ctype} *restrict o, long long ldo) {{",
            f"    typedef {ctype} vT __attribute__((vector_size({vw * size}), aligned({size})));",
            f"    vT acc[{mr}][{nv}];",
            f"    for (int i = 0; i < {mr}; i++)",
            f"        for (int j = 0; j < {nv}; j++) acc[i][j] = (vT){{0}};",
            "    for (long long t = 0; t < kt; t++) {",
            f"        vT b[{nv}];",
            f"        for (int j = 0; j < {nv}; j++) b[j] = *(const vT *)(v + t * ldv + j * {vw});",
            f"        for (int i = 0; i < {mr}; i++) {{",
            f"            const {ctype} a = u[i * ldu + t];",
            f"            for (int j = 0; j < {nv}; j++) acc[i][j] += a * b[j];",
            "        }",
            "    }",
            f"    for (int i = 0; i < {mr}; i++)",
            f"        for (int j = 0; j < {nv}; j++) *(vT *)(o + i * ldo + j * {vw}) += acc[i][j];",
            "}", ""]
    return out


def _transpose_blocks(ctype: str, vw: int, cp: int, ch: int) -> list[str]:
    """C copying a row of the input channels-last, ``VW`` channels x ``VW`` columns at a time: ``VW`` vector loads
    (one per channel), a transpose in registers (log2(VW) rounds of interleaving the rows ``i`` and ``i + VW/2``:
    two-source shuffles), ``VW`` vector stores (one per column); a row's last block overlaps the one before (the
    same values stored twice). Scalar where the row is shorter than a vector or without the shuffles."""
    lo = [k // 2 + (vw if k % 2 else 0) for k in range(vw)]
    hi = [vw // 2 + k // 2 + (vw if k % 2 else 0) for k in range(vw)]
    rounds = []
    for _ in range(vw.bit_length() - 1):
        rounds.append("                        { vT t[" + f"{vw}];")
        for j in range(vw // 2):
            rounds.append(f"                          t[{2 * j}] = {_shuffle(f'q[{j}]', f'q[{j + vw // 2}]', lo)};")
            rounds.append(f"                          t[{2 * j + 1}] = {_shuffle(f'q[{j}]', f'q[{j + vw // 2}]', hi)};")
        rounds.append("                          memcpy(q, t, sizeof(t)); }")
    return [
        SHUFFLES,
        f"            if (whi - wlo >= {vw})",
        f"                for (; c + {vw} <= {ch}; c += {vw})",
        f"                    for (long long x0 = wlo; x0 < whi; x0 += {vw}) {{",
        f"                        const long long x = x0 + {vw} <= whi ? x0 : whi - {vw};",
        f"                        vT q[{vw}];",
        f"                        for (int i = 0; i < {vw}; i++) q[i] = *(const vT *)(s0 + (c + i) * RC + x);",
        *rounds,
        f"                        for (int l = 0; l < {vw}; l++) *(vT *)(dst + (x + l) * {cp} + c) = q[l];",
        "                    }",
        "#endif"]


def _loads(e: int, vw: int, ctype: str, avx512: bool) -> list[str]:
    """C macro ``LOADE(p, cnt, x)``: ``x[0 .. e-1]``, the ``e`` vectors of a dY row at ``p`` (``cnt`` elements
    there), zeros past them (never read past: masked loads with AVX-512, a zero-padded copy otherwise)."""
    v, mt, ld = ("v16sf", "unsigned short", "__builtin_ia32_loadups512_mask") if ctype == "float" else \
        ("v8df", "unsigned char", "__builtin_ia32_loadupd512_mask")
    plain = [
        "#define LOADE(p, cnt, x) do { \\",
        f"    if ((cnt) >= {e * vw}) {{ for (int k_ = 0; k_ < {e}; k_++) x[k_] = *(const vT *)((p) + k_ * {vw}); }} \\",
        f"    else {{ {ctype} t_[{e * vw}] = {{0}}; memcpy(t_, (p), (size_t)(cnt) * sizeof({ctype})); \\",
        f"        for (int k_ = 0; k_ < {e}; k_++) x[k_] = *(const vT *)(t_ + k_ * {vw}); }} \\",
        "    } while (0)"]
    if not avx512:
        return plain
    return [MASKED,
            "#define LOADE(p, cnt, x) do { \\",
            f"    if ((cnt) >= {e * vw}) {{ for (int k_ = 0; k_ < {e}; k_++) "
            f"x[k_] = *(const vT *)((p) + k_ * {vw}); }} \\",
            f"    else {{ const {v} z_ = {{0}}; \\",
            f"        for (int k_ = 0; k_ < {e}; k_++) {{ const long long c_ = (cnt) - k_ * {vw}; \\",
            f"            x[k_] = c_ >= {vw} ? *(const vT *)((p) + k_ * {vw}) : c_ > 0 ? \\",
            f"                (vT){ld}((p) + k_ * {vw}, z_, ({mt})((1u << c_) - 1)) : (vT){{0}}; }} }} \\",
            "    } while (0)",
            "#else", *plain, "#endif"]


def _phases(e: int, vw: int, sp: str, src: str, dst: str, prefix: str) -> list[str]:
    """C (shuffle branch) setting ``dst[k]`` (k < e), lane l = element ``e * l + k`` of the ``e`` vectors
    ``src[0 .. e-1]``: even / odd splits, log2(e) rounds (their vectors named ``prefix...``)."""
    vecs = [(f"{src}[{k}]", [k * vw + lane for lane in range(vw)]) for k in range(e)]
    lines: list = []
    for rnd in range(e.bit_length() - 1):
        vecs = _shuffle_round(vecs, rnd, False, prefix, sp, "vT", lines)
    by_phase = {labels[0]: nm for nm, labels in vecs}
    return lines + [f"{sp}{dst}[{k}] = {by_phase[k]};" for k in range(e)]


def render_wino_dw(r, name: str, g, plan) -> str:
    """C of the weight-gradient Winograd kernel ``name`` for GEMM ``g`` with the direct plan ``plan`` (mode
    ``"winodw"``), rendered through ``r`` (the C renderer: buffer slots, pointer names, symbols); the signature of
    the fused own GEMM (:func:`.gemm_direct.render_direct`)."""
    from .gemm import _COMMON

    w = plan.wino
    ctype, size = g.dtype.c_type, g.dtype.itemsize
    gm = dw_geometry(w, size)
    vw, tw, th, r_, cp, nv, mr, mp, tsp = (gm[k] for k in ("VW", "TW", "TH", "R", "CP", "NV", "MR", "MP", "TSP"))
    ch, oh, ow, m = w["CH"], w["OH"], w["OW"], w["M"]
    e = w["E"]
    pp = e + 2  # the input patch's side (and the transformed positions' side)
    npos = pp * pp
    bt, gmat, at = TRANSFORMS[e]  # B^T (pp x pp), G (pp x 3), A^T (e x pp): the forward F(e x e, 3x3)'s
    h2, w2 = e * th + 2, e * tw + 2
    dims = plan.dims
    rs = [_prod(dims[a + 1:]) for a in range(len(dims))]
    ptr = r.pointer(plan.src)
    H, W = w["H"], w["W"]
    og_h, og_w = plan.origin[H], plan.origin[W]
    src_b = f"b * {_c(rs[w['b']], r)}" if w["b"] is not None else "0"
    tsv = r_ * tw  # rows of V (one per tile of a block)
    v = "v16sf" if ctype == "float" else "v8df"
    avx512 = vw * size == 64
    sp = " " * 24
    gemm = [f"                    for (long long c0 = 0; c0 < {cp // vw}; c0 += {nv}) {{",
            f"                        const long long left = {cp // vw} - c0;",
            f"                        const {ctype} *uu = U + (xi * {mp} + mb * {mr}) * {tsp}LL;",
            f"                        const {ctype} *vv = V + xi * {tsv * cp}LL + c0 * {vw};",
            f"                        {ctype} *oo = Mc + (xi * {mp} + mb * {mr}) * {cp}LL + c0 * {vw};",
            f"                        if (left >= {nv}) {name}_d{nv}(T, uu, {tsp}, vv, {cp}, oo, {cp});"]
    gemm += [f"                        else if (left == {k}) {name}_d{k}(T, uu, {tsp}, vv, {cp}, oo, {cp});"
             for k in range(1, nv)]
    gemm += ["                    }"]
    # V = B^T d B along the channels: t[i][j'] = sum_j B^T[j'][j] d[i][j], V[i'][j'] = sum_i B^T[i'][i] t[i][j']
    vtrans = [f"{sp}t[i][{j}] = {_lin(bt[j], [f'd[i][{k}]' for k in range(pp)], ctype)};" for j in range(pp)]
    vstore = [f"{sp}*(vT *)(vo + {i * pp} * {tsv * cp}LL + j * {tsv * cp}LL + cv) = "
              f"{_lin(bt[i], [f't[{k}][j]' for k in range(pp)], ctype)};" for i in range(pp)]
    # U = A g A^T along a row of tiles (A = (A^T)^T, pp x e): q[a][k] = sum_i A^T[i][a] g[i][k], U[a][b] = sum_k
    # A^T[k][b] q[a][k]
    urow = [f"{sp}q[{a}][k] = {_lin([at[i][a] for i in range(e)], [f'g[{i}][k]' for i in range(e)], ctype)};"
            for a in range(pp)]
    ustore = [f"{sp}*(vT *)(uo + ({a * pp} + {b}) * {mp * tsp}LL + t0) = "
              f"{_lin([at[k][b] for k in range(e)], [f'q[{a}][{k}]' for k in range(e)], ctype)};"
              for a in range(pp) for b in range(pp)]
    # dW = G^T X G: s[i][b] = sum_a G[a][i] x[a][b], o[i][j] = sum_b G[b][j] s[i][b]
    osum = [f"{sp[:20]}s[{i}][j] = {_lin([gmat[a][i] for a in range(pp)], [f'x[{a}][j]' for a in range(pp)], ctype)};"
            for i in range(3)]
    oput = [f"{sp[:20]}o[i * 3 + {j}] = "
            f"{_lin([gmat[b][j] for b in range(pp)], [f's[i][{b}]' for b in range(pp)], ctype)};" for j in range(3)]
    phase_lines = []
    for i in range(e):
        phase_lines += _phases(e, vw, sp, f"a[{i}]", f"g[{i}]", f"p{i}_")
    per = f"({npos}LL * {tsv * cp} + {npos}LL * {mp * tsp} + {npos}LL * {mp * cp} + {4 * vw})"
    lines = [
        f"/* {name}: Winograd F(3x3, {e}x{e}) weight gradient (see luminal/codegen/gemm_winograd_dw.py): {ch} -> {m} "
        f"channels, {oh} x {ow} positions */",
        *_tiles(name, ctype, mr, nv, vw),
        f"static int {name}(long long M, long long N, long long K, const {ctype} *A, long long sam, long long sak,",
        f"                  const {ctype} *Bpro, long long sbn, long long sbk, {ctype} *C, lm_epilogue epi,"
        " void **bufs, const long long *syms) {",
        f"    typedef {ctype} vT __attribute__((vector_size({vw * size}), aligned({size})));",
        *([f"    typedef {ctype} {v} __attribute__((vector_size(64)));"] if avx512 else []),
        *_loads(e, vw, ctype, avx512),
        f"    const {ctype} *restrict {ptr} = (const {ctype} *)bufs[{r.slot[plan.src]}];",
        *[f"    const long long {r.names[s]} = syms[{r.symbols.index(s)}]; (void){r.names[s]};" for s in r.symbols],
        "    (void)Bpro; (void)sbn; (void)sbk; (void)sak; (void)syms;",
        "    if (M <= 0 || N <= 0) return 0;",
        f"    const long long NI = K / {oh * ow}LL, G = NI * {th}LL, NBK = (G + {r_ - 1}) / {r_};",
        "    if (K <= 0) {",
        f"        for (long long m = 0; m < M; m++) memset(C + m * N, 0, (size_t)N * sizeof({ctype}));",
        "        return epi ? lm_epilogue_all(epi, bufs, syms, M, N) : 0;",
        "    }",
        f"    const long long XT = NI * {h2 * w2 * cp}LL;  /* the input, channels-last, padded to whole tiles */",
        f"    size_t bytes = ((size_t)XT + (size_t){per} * (size_t)omp_get_max_threads() + 64) * sizeof({ctype});",
        "    char *mem = (char *)lm_og_grow(&lm_dc_buf, &lm_dc_cap, bytes);",
        "    if (!mem) return 3;",
        f"    {ctype} *restrict xt = ({ctype} *)mem;",
        f"    {ctype} *restrict wsp = xt + ((XT + 15) & ~15LL);",
        "    const int par = !omp_in_parallel() && (double)M * (double)N * (double)K >= (double)LM_OWN_GEMM_PAR_MACS;",
        "    int err = 0;",
        "    #pragma omp parallel if(par)",
        "    {",
        "        #pragma omp for schedule(static)",
        f"        for (long long row = 0; row < NI * {h2}LL; row++) {{",
        f"            const long long b = row / {h2}LL, h = row % {h2}LL + ({og_h}LL);",
        f"            {ctype} *restrict dst = xt + row * {w2 * cp}LL;",
        f"            if (h < 0 || h >= {_c(dims[H], r)}) {{ memset(dst, 0, {w2 * cp} * sizeof({ctype})); continue; }}",
        f"            const long long wlo = {-og_w}LL > 0 ? {-og_w}LL : 0;",
        f"            const long long whi = {_c(dims[W], r)} - ({og_w}LL) < {w2}LL ? {_c(dims[W], r)} - ({og_w}LL) : "
        f"{w2}LL;",
        f"            for (long long x = 0; x < {w2}; x++)",
        f"                if (x < wlo || x >= whi) memset(dst + x * {cp}, 0, {cp} * sizeof({ctype}));",
        f"                else if ({cp - ch}) memset(dst + x * {cp} + {ch}, 0, {cp - ch} * sizeof({ctype}));",
        f"            const {ctype} *s0 = {ptr} + {src_b} + h * {_c(rs[H], r)} + ({og_w}LL);",
        f"            const long long RC = {_c(rs[w['c']], r)};",
        "            long long c = 0;",
        *_transpose_blocks(ctype, vw, cp, ch),
        f"            for (; c < {ch}; c++)  /* (the channels past the last whole vector of them) */",
        "                for (long long x = wlo; x < whi; x++) dst[x * " + f"{cp} + c] = s0[c * RC + x];",
        "        }",
        f"        {ctype} *restrict V = wsp + (long long)omp_get_thread_num() * {per};",
        f"        {ctype} *restrict U = V + {npos}LL * {tsv * cp};",
        f"        {ctype} *restrict Mc = U + {npos}LL * {mp * tsp};",
        f"        memset(Mc, 0, {npos}LL * {mp * cp} * sizeof({ctype}));",
        f"        for (int xi = 0; xi < {npos}; xi++)  /* (rows of U past M: zeros, never written) */",
        f"            memset(U + (xi * {mp}LL + M) * {tsp}, 0, ({mp}LL - M) * {tsp} * sizeof({ctype}));",
        "        #pragma omp for schedule(static)",
        "        for (long long blk = 0; blk < NBK; blk++) {",
        f"            const long long g0 = blk * {r_}, nr = G - g0 < {r_} ? G - g0 : {r_}, T = nr * {tw}LL;",
        "            for (long long r = 0; r < nr; r++) {  /* V = B^T d B, vectors along the channels */",
        f"                const long long g = g0 + r, b = g / {th}LL, te = g % {th}LL * {e};",
        f"                for (long long x = 0; x < {tw}; x++) {{",
        f"                    const {ctype} *d0 = xt + ((b * {h2}LL + te) * {w2}LL + {e} * x) * {cp}LL;",
        f"                    {ctype} *vo = V + (r * {tw}LL + x) * {cp}LL;",
        f"                    for (long long cv = 0; cv < {cp}; cv += {vw}) {{",
        f"                        vT d[{pp}][{pp}], t[{pp}][{pp}];",
        f"                        for (int i = 0; i < {pp}; i++)",
        f"                            for (int j = 0; j < {pp}; j++) d[i][j] = *(const vT *)(d0 + (i * {w2}LL + j) * "
        f"{cp}LL + cv);",
        f"                        for (int i = 0; i < {pp}; i++) {{",
        *["    " + x for x in vtrans],
        "                        }",
        f"                        for (int j = 0; j < {pp}; j++) {{",
        *["    " + x for x in vstore],
        "                        }",
        "                    }",
        "                }",
        "            }",
        "            for (long long m = 0; m < M; m++)  /* U = A g A^T, vectors along a row of tiles */",
        "                for (long long r = 0; r < nr; r++) {",
        f"                    const long long g_ = g0 + r, te = g_ % {th}LL * {e};",
        f"                    const {ctype} *p0 = A + m * sam + g_ / {th}LL * {oh * ow}LL + te * {ow}LL;",
        f"                    {ctype} *uo = U + m * {tsp}LL + r * {tw}LL;",
        "                    if (m + 1 < M)  /* (prefetch the next channel's rows: W4's conv2 dW 3.7 -> 3.3 ms) */",
        f"                        for (int pf = 0; pf < {e * ow}; pf += {64 // size}) "
        "__builtin_prefetch(p0 + sam + pf);",
        f"                    for (long long t0 = 0; t0 < {tw}; t0 += {vw}) {{",
        f"                        const long long cnt = {ow}LL - {e} * t0;",
        f"                        vT a[{e}][{e}], g[{e}][{e}], q[{pp}][{e}];",
        *[f"                        if (te + {i} < {oh}) LOADE(p0 + {i * ow} + {e} * t0, cnt, a[{i}]); "
          f"else for (int k = 0; k < {e}; k++) a[{i}][k] = (vT){{0}};" for i in range(e)],
        SHUFFLES,
        *phase_lines,
        "#else",
        f"                        for (int i = 0; i < {e}; i++)",
        f"                            for (int k = 0; k < {e}; k++)",
        f"                                for (int l = 0; l < {vw}; l++)  /* element {e} * l + k of the row */",
        f"                                    g[i][k][l] = a[i][({e} * l + k) / {vw}][({e} * l + k) % {vw}];",
        "#endif",
        f"                        for (int k = 0; k < {e}; k++) {{",
        *["    " + x for x in urow],
        "                        }",
        *ustore,
        "                    }",
        "                }",
        f"            for (int xi = 0; xi < {npos}; xi++)  /* the {npos} products, summed over the block's tiles */",
        f"                for (long long mb = 0; mb < {mp // mr}; mb++) {{",
        *gemm,
        "                }",
        "        }",
        "        const long long nt = omp_get_num_threads();",
        "        #pragma omp for schedule(static)  /* the threads' sums into thread 0's */",
        f"        for (long long q = 0; q < {npos} * M; q++) {{",
        f"            {ctype} *d0 = wsp + {npos}LL * {tsv * cp} + {npos}LL * {mp * tsp} + "
        f"(q / M * {mp} + q % M) * {cp}LL;",
        "            for (long long s = 1; s < nt; s++)",
        f"                for (long long c = 0; c < {ch}; c++) d0[c] += d0[s * {per} + c];",
        "        }",
        "        #pragma omp for schedule(static)  /* dW = G^T M G */",
        "        for (long long m = 0; m < M; m++) {",
        f"            const {ctype} *mm = wsp + {npos}LL * {tsv * cp} + {npos}LL * {mp * tsp} + m * {cp}LL;",
        f"            for (long long c = 0; c < {ch}; c++) {{",
        f"                {ctype} x[{pp}][{pp}], s[3][{pp}];",
        f"                for (int xi = 0; xi < {npos}; xi++) x[xi / {pp}][xi % {pp}] = mm[xi * {mp * cp}LL + c];",
        f"                for (int j = 0; j < {pp}; j++) {{",
        *osum,
        "                }",
        f"                {ctype} *o = C + m * N + c * 9;",
        "                for (int i = 0; i < 3; i++) {",
        *oput,
        "                }",
        "            }",
        "        }",
        "    }",
        "    if (epi) err = epi(bufs, syms, 0, M, 0, N);",
        "    return err;",
        "}",
        "#undef LOADE",
    ]
    head = _COMMON + "\n#ifndef LM_DIRECT_BUF\n#define LM_DIRECT_BUF\n" + DIRECT_BUF
    return head + "\n".join(lines)
