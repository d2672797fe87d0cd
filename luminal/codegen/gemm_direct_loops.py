"""The loops of the direct convolution's three forms (:mod:`.gemm_direct`), rendered as C.

:func:`rows_loops` (the window is B; tiles of ``NV`` vectors of output positions x ``MR`` rows of A),
:func:`dot_loops` (a weight gradient: tiles of dot products along the sum) and :func:`cols_loops` (the window is B;
tiles of ``MV`` vectors of A's rows x ``NB`` output positions) write the part of the direct kernel's function after
its padded copy is made (:func:`split_two`: a stride-2 copy's row split into its phases): the offset tables, the
threads' shares, the register tiles, the stores into C and the epilogue calls. All get ``part(role, var)``, the C
expression of the copy's offset for the GEMM index ``var``'s axes of ``role`` (``"row"`` / ``"k"``), from
:func:`.gemm_direct.render_direct`, and ``base``, the C expression of the copy's offset where every index is 0
(symbolic when a batch of any size lies inside it).
"""

from __future__ import annotations

import math

from ..dtype import DType
from .gemm_config import _registers, vector_bytes


def tile(dtype: DType, m: int = 8) -> tuple[int, int, int]:
    """``(MR, NV, VW)`` for ``m`` rows of A: rows of A, vectors of output positions and elements per vector of the
    register tile (``MR * NV`` accumulators: 8 x 3 with 32 vector registers, 4 x 3 with 16; at most 4 rows
    (the input gradient of a convolution of few input channels) 4 x 6 / 4 x 3, one or two (a depthwise
    convolution: one row per group) 1 x 8 / 2 x 8 (1 x 6 / 2 x 3), no idle rows)."""
    vw = vector_bytes() // dtype.itemsize
    if _registers() == 32:
        return (max(m, 1), 8, vw) if m <= 2 else (4, 6, vw) if m <= 4 else (8, 3, vw)
    return (max(m, 1), 6 // max(m, 1), vw) if m <= 2 else (4, 3, vw)


_EPI = ["        if (terr) {", "            #pragma omp critical(lm_direct_err)",
        "            { if (!err) err = terr; }", "        }"]


def rows_loops(part, ctype, mr, vw, lq, vpr, base, m, fused_a, wide=None, batch=None) -> list[str]:
    """The "rows" form: tiles of ``NV`` vectors of output positions x ``MR`` rows of A, the sum over K in
    registers; A interleaved by ``MR`` rows first (``fused_a``: by its prologue's pack callback). Each thread takes
    a contiguous share of the tiles, in chunks of ``ROWS_CHUNK``: every block of ``MR`` rows passes over a chunk
    (its block of A, ``MR x K``, in L1; the chunk's windows in L2), then the epilogue runs on the chunk's columns.
    ``batch``: ``(count, copy offset, A offset)`` of a batched GEMM (a grouped convolution, one GEMM per group),
    the offsets C expressions of the batch index ``b``: the tiles of every batch element are shared out together
    (a chunk never crosses two), C's batch stride is ``M * N``, and the epilogue's rows are ``b * M + m``
    (:func:`luminal.codegen.groups.epilogue_value`'s batched form)."""
    nbat, boff, aoff = batch or (1, "0", "0")
    nv = tile(DType.float32 if ctype == "float" else DType.float64, m)[1]
    sp = " " * 20
    tables: list[str] = []
    if wide is None:  # vectors along runs of the output's innermost axis (a run's last one partial)
        nvec = f"N / {lq}LL * {vpr}LL"
        setup = [f"{sp}for (int v = 0; v < {nv}; v++) {{",
                 f"{sp}    const long long g = t * {nv} + (v < nv ? v : nv - 1), c = g % {vpr}LL;",
                 f"{sp}    const long long n0 = g / {vpr}LL * {lq}LL + c * {vw}LL;",
                 f"{sp}    at[v] = n0; len[v] = {lq}LL - c * {vw}LL < {vw} ? {lq}LL - c * {vw}LL : {vw};",
                 f"{sp}    off[v] = xb + {base} + c * {vw}LL + {part('row', 'n0')};",
                 f"{sp}}}",
                 f"{sp}if (n_lo < 0) n_lo = at[0];",
                 f"{sp}n_hi = at[nv - 1] + len[nv - 1];"]
        store = [f"{sp}for (int v = 0; v < nv; v++)",
                 f"{sp}    for (int i = 0; i < {mr} && mb * {mr} + i < M; i++) {{",
                 f"{sp}        {ctype} *c = cb + (mb * {mr} + i) * N + at[v];",
                 f"{sp}        if (len[v] == {vw}) *(vT *)c = acc[i][v];",
                 f"{sp}        else memcpy(c, &acc[i][v], (size_t)len[v] * sizeof({ctype}));",
                 f"{sp}    }}"]
    else:  # vectors along planes of q2 x padded rows of wp (positions w >= lq of a row computed and dropped)
        q2n, wp = wide
        plane, vpp = q2n * wp, -(-(q2n * wp) // vw)
        nvec = f"N / {q2n * lq}LL * {vpp}LL"
        setup = [f"{sp}for (int v = 0; v < {nv}; v++) {{",
                 f"{sp}    const long long g = t * {nv} + (v < nv ? v : nv - 1);",
                 f"{sp}    const long long n0 = g / {vpp}LL * {q2n * lq}LL;  /* the plane's first output */",
                 f"{sp}    at[v] = n0; len[v] = g % {vpp}LL * {vw}LL;  /* (here: the vector's first position) */",
                 f"{sp}    off[v] = xb + {base} + len[v] + {part('row', 'n0')};",
                 f"{sp}}}",
                 f"{sp}for (int v = 0; v < nv; v += nv - 1) {{  /* the outputs the chunk's vectors store */",
                 f"{sp}    long long f = len[v], last = (f + {vw} < {plane}LL ? f + {vw} : {plane}LL) - 1;",
                 f"{sp}    if (f % {wp}LL >= {lq}LL) f += {wp}LL - f % {wp}LL;  /* first and last stored positions */",
                 f"{sp}    if (last % {wp}LL >= {lq}LL) last -= last % {wp}LL - ({lq}LL - 1);",
                 f"{sp}    if (!v && n_lo < 0) n_lo = at[v] + f / {wp}LL * {lq}LL + f % {wp}LL;",
                 f"{sp}    if (v == nv - 1) n_hi = at[v] + last / {wp}LL * {lq}LL + last % {wp}LL + 1;",
                 f"{sp}    if (nv == 1) break;",
                 f"{sp}}}"]
        store = [f"{sp}for (int v = 0; v < nv; v++) {{",
                 f"{sp}    const long long f0 = len[v], e = f0 + {vw} < {plane}LL ? f0 + {vw} : {plane}LL;",
                 f"{sp}    for (long long f = f0; f < e; ) {{",
                 f"{sp}        const long long w = f % {wp}LL;",
                 f"{sp}        if (w >= {lq}LL) {{ f += {wp}LL - w; continue; }}",
                 f"{sp}        const long long seg = {lq}LL - w < e - f ? {lq}LL - w : e - f;",
                 f"{sp}        const long long n = at[v] + f / {wp}LL * {lq}LL + w;",
                 f"{sp}        for (int i = 0; i < {mr} && mb * {mr} + i < M; i++)",
                 f"{sp}            memcpy(cb + (mb * {mr} + i) * N + n, ({ctype} *)&acc[i][v] + (f - f0), "
                 f"(size_t)seg * sizeof({ctype}));",
                 f"{sp}        f += seg;",
                 f"{sp}    }}",
                 f"{sp}}}"]
        if vw * (4 if ctype == "float" else 8) == 64:  # AVX-512: each vector's kept lanes in one compress-store
            store = _compress_store(store, sp, ctype, mr, vw)
            tables = _lane_tables(vw, vpp, plane, wp, lq)
    return [
        *tables,
        f"    {ctype} *restrict ap = ({ctype} *)rest;",
        f"    long long *restrict koff = (long long *)(ap + {nbat}LL * MB * {mr} * K);",
        f"    for (long long k = 0; k < K; k++) koff[k] = {part('k', 'k')};",
        *interleave_a(ctype, mr, nbat, aoff, fused_a),
        f"    const long long nvec = {nvec}, ntile = (nvec + {nv - 1}) / {nv}, nall = ntile * {nbat}LL;",
        "    #pragma omp parallel if(par)",
        "    {",
        "        const long long nt = omp_get_num_threads(), id = omp_get_thread_num();",
        "        const long long t0 = nall * id / nt, t1 = nall * (id + 1) / nt;",
        "        int terr = 0;",
        f"        for (long long c0 = t0, c1; c0 < t1; c0 = c1) {{",
        "            const long long b = c0 / ntile, bend = (b + 1) * ntile;  /* (a chunk in one batch element) */",
        f"            c1 = c0 + {ROWS_CHUNK} < t1 ? c0 + {ROWS_CHUNK} : t1;",
        "            if (c1 > bend) c1 = bend;",
        f"            const long long xb = {boff};",
        f"            {ctype} *cb = C + b * M * N;",
        "            long long n_lo = -1, n_hi = 0;",
        "            for (long long mb = 0; mb < MB; mb++) {",
        f"                const {ctype} *restrict a = ap + (b * MB + mb) * K * {mr};",
        "                for (long long t = c0 - b * ntile; t < c1 - b * ntile; t++) {",
        f"                    long long off[{nv}], at[{nv}], len[{nv}];",
        f"                    const int nv = nvec - t * {nv} < {nv} ? (int)(nvec - t * {nv}) : {nv};",
        *setup,
        *_tile_sums(mr, nv, store),
        "                }",
        "            }",
        "            if (epi && n_hi > n_lo) {",
        "                int e = epi(bufs, syms, b * M, b * M + M, n_lo, n_hi);  /* (rows b * M + m: batched) */",
        "                if (e && !terr) terr = e;",
        "            }",
        "        }",
        *_EPI,
        "    }",
    ]


def interleave_a(ctype: str, mr: int, nbat: int, aoff: str, fused_a: bool) -> list[str]:
    """C writing A into ``ap`` interleaved by ``mr`` rows (``ap[((b * MB + mb) * K + k) * mr + i]`` = row
    ``mb * mr + i`` of batch element ``b``, zeros past ``M``), the blocks in parallel: through the prologue's pack
    callback where ``fused_a`` (MR-row slivers over all of K are this layout), else row by row of A (contiguous
    reads). The rows and cols forms' A (``aoff``: the batch element's offset, a C expression of ``b``)."""
    short = "f32" if ctype == "float" else "f64"
    head = ["    #pragma omp parallel for collapse(2) schedule(static) if(par)",
            f"    for (long long b = 0; b < {nbat}LL; b++)",
            "        for (long long mb = 0; mb < MB; mb++) {",
            f"            const long long m0 = mb * {mr}, m1 = m0 + {mr} < M ? m0 + {mr} : M;",
            f"            {ctype} *restrict dst = ap + (b * MB + mb) * K * {mr};"]
    if fused_a:
        body = [f"            const lm_pro_{short} *pa = (const lm_pro_{short} *)(const void *)A;",
                f"            pa->fn(bufs, syms, pa->bi + b, m0, m1 - m0, 0, K, dst, {mr});"]
    else:
        body = [f"            for (long long i = 0; i < {mr}; i++) {{",
                "                if (m0 + i < m1) {",
                f"                    const {ctype} *s = A + ({aoff}) + (m0 + i) * sam;",
                f"                    for (long long k = 0; k < K; k++) dst[k * {mr} + i] = s[k * sak];",
                f"                }} else for (long long k = 0; k < K; k++) dst[k * {mr} + i] = ({ctype})0;",
                "            }"]
    return head + body + ["        }"]


def _tile_sums(mr: int, nv: int, store: list[str]) -> list[str]:
    """C of one tile's sums over K and its stores: ``MR x NV`` accumulators, or, where the tile holds at most half
    of its ``NV`` vectors (``nv``, known at run time: a depthwise layer's 7 x 7 plane is 4 vectors, a tile 8), a
    tile of ``NV / 2`` (the full one multiplies and loads repeats of the last vector: 576 channels of 7 x 7 took
    59 us, 48 with the half tile)."""
    def sums(w):
        return [f"vT acc[{mr}][{w}];",
                f"for (int i = 0; i < {mr}; i++)",
                f"    for (int v = 0; v < {w}; v++) acc[i][v] = (vT){{0}};",
                "for (long long k = 0; k < K; k++) {",
                f"    vT b[{w}];",
                f"    for (int v = 0; v < {w}; v++) b[v] = *(const vT *)(xp + off[v] + koff[k]);",
                f"    for (int i = 0; i < {mr}; i++)",
                f"        for (int v = 0; v < {w}; v++) acc[i][v] += a[k * {mr} + i] * b[v];",
                "}",
                *[x[20:] if x.startswith(" " * 20) else x for x in store]]
    sp = " " * 20
    if nv < 4:
        return [sp + x if x and not x.startswith("#") else x for x in sums(nv)]
    out = [f"{sp}if (nv <= {nv // 2}) {{"] + [sp + "    " + x if not x.startswith("#") else x for x in sums(nv // 2)]
    out += [f"{sp}}} else {{"] + [sp + "    " + x if not x.startswith("#") else x for x in sums(nv)] + [f"{sp}}}"]
    return out


def _lane_tables(vw: int, vpp: int, plane: int, wp: int, lq: int) -> list[str]:
    """C of the wide rows form's per-vector tables (the same in every plane of ``plane`` padded positions, rows
    of ``wp`` of which the first ``lq`` are outputs): ``emask[j]``, the lanes of the plane's vector ``j`` that are
    outputs, ``ecount[j]`` as many first lanes, and ``efirst[j]``, the output index (in the plane) of its first
    such lane."""
    return [
        "#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)",
        f"    unsigned emask[{vpp}], ecount[{vpp}]; long long efirst[{vpp}];",
        f"    for (long long j = 0; j < {vpp}; j++) {{",
        "        emask[j] = 0; ecount[j] = 0; efirst[j] = -1;",
        f"        for (long long l = 0; l < {vw}; l++) {{",
        f"            const long long f = j * {vw} + l;",
        f"            if (f < {plane}LL && f % {wp}LL < {lq}LL) {{",
        "                emask[j] |= 1u << l; ecount[j] = ecount[j] * 2 + 1;  /* (as many first lanes) */",
        f"                if (efirst[j] < 0) efirst[j] = f / {wp}LL * {lq}LL + f % {wp}LL;",
        "            }",
        "        }",
        "    }",
        "#endif"]


def _compress_store(store: list[str], sp: str, ctype: str, mr: int, vw: int) -> list[str]:
    """The wide rows form's stores with AVX-512: each vector's output lanes compressed to its first lanes in a
    register, then one masked store (its output lanes are consecutive outputs: the rows of a plane follow one
    another in C). ``store`` (a loop of row segments, one ``memcpy`` each: ``rep movs``, half of a 7x7
    depthwise layer's time) where the builtins are not there. (A compress-store to memory is microcoded on
    Zen 4: no faster than the ``memcpy``s.)"""
    v, m, comp, st = ("v16sf", "unsigned short", "__builtin_ia32_compresssf512_mask",
                      "__builtin_ia32_storeups512_mask") if ctype == "float" else \
        ("v8df", "unsigned char", "__builtin_ia32_compressdf512_mask", "__builtin_ia32_storeupd512_mask")
    return [
        "#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)",
        f"{sp}typedef {ctype} {v} __attribute__((vector_size(64)));",
        f"{sp}for (int v = 0; v < nv; v++) {{",
        f"{sp}    const long long j = len[v] / {vw}LL;  /* (the plane's vector j) */",
        f"{sp}    for (int i = 0; i < {mr} && mb * {mr} + i < M && ecount[j]; i++) {{",
        f"{sp}        const {v} c = {comp}(({v})acc[i][v], ({v})acc[i][v], ({m})emask[j]);",
        f"{sp}        {st}(cb + (mb * {mr} + i) * N + at[v] + efirst[j], c, ({m})ecount[j]);",
        f"{sp}    }}",
        f"{sp}}}",
        "#else",
        *store,
        "#endif"]


ROWS_CHUNK = 16  # tiles (of NV vectors) per pass over the row blocks of A: their windows stay in L2
DOT_CHUNK_BYTES = 1 << 14  # the "dot" form sums K in chunks whose MR rows of the plain operand fill about this much


DOT_TILE = {32: (4, 4), 16: (2, 4)}  # (rows of A, columns of C) of the "dot" form by vector registers


def dot_tile(p: int, q: int) -> tuple[int, int]:
    """``(MR, NR)`` of the "dot" form for ``p`` rows of the plain operand and ``q`` of the window operand:
    :data:`DOT_TILE`, or with fewer than its ``MR`` plain rows (a depthwise convolution's weight gradient: one
    per group) those rows and as many window rows as the registers hold (``MR * NR`` sums, ``MR + NR`` loads),
    the count that leaves the fewest idle columns (9 for a 3x3 kernel, 7 for 7x7)."""
    mr, nr = DOT_TILE[_registers()]
    if p >= mr:
        return mr, nr
    mr = max(p, 1)
    most = min(12, (_registers() - 2 - mr) // (mr + 1))
    return mr, min(range(most, max(1, most // 2) - 1, -1), key=lambda c: -(-q // c) * c)


def dot_runs(lq: int, vw: int) -> bool:
    """Whether the "dot" form takes runs of ``lq`` elements with ``vw``-lane vectors: every vector of the sum,
    cut anywhere in a run, then spans at most two runs."""
    return lq >= 1 and vw - 1 - math.gcd(vw, lq) < lq


def dot_loops(part, ctype, vw, lq, base, side, fused_plain, batch=None, pq=(4, 4)) -> list[str]:
    """The "dot" form (a weight gradient: the sum runs along the input's rows): tiles of ``MR`` rows of the plain
    operand x ``NR`` of the window operand (on GEMM ``side``), each a vector accumulator summed over the vectors
    of K, its lanes added at the end. The plain operand is read in place (contiguous along K) or, ``fused_plain``,
    first computed row-major into scratch by its prologue's pack callback; its vectors are consecutive stretches
    of K. In the copy K runs along rows of ``lq`` (the input's rows): a vector that crosses from one run into the
    next (rows of 28 = 16 + 12 lanes, then 4 + 12 from the next) loads both places and blends them with a lane
    mask (:func:`dot_runs`: never more than two runs), so no lane idles; the last ``K % VW`` products are summed
    one by one. Each thread takes a contiguous share of the tiles, ordered so that consecutive tiles share their
    rows of the plain operand, and passes over K in chunks (``DOT_CHUNK_BYTES`` of a tile's ``MR`` plain rows: in
    L1 while the tiles beside it pass), keeping each tile's vector sums between chunks in a thread-local scratch;
    the epilogue runs on a tile after its last chunk. ``batch``: as for :func:`rows_loops` (the offset there the
    plain operand's); ``pq``: the rows of the plain and the window operand (:func:`dot_tile`)."""
    if not dot_runs(lq, vw):
        raise ValueError(f"gemm_direct: the dot form needs runs of at least {vw - math.gcd(vw, lq)} elements")
    nbat, boff, poff = batch or (1, "0", "0")
    mr, nr = dot_tile(*pq)
    chunk = max(16, DOT_CHUNK_BYTES // (vw * (4 if ctype == "float" else 8) * mr))
    # P: the plain operand's rows (M or N), Q: the window operand's (the other)
    p_n, q_n, p_ptr, p_stride = ("M", "N", "A", "sam") if side == "b" else ("N", "M", "Bpro", "sbn")
    short = "f32" if ctype == "float" else "f64"
    scratch = []
    if fused_plain:  # the plain operand through its prologue: its pack callback writes it row-major (slivers of 1)
        scratch = [f"    {ctype} *restrict pm = ({ctype} *)(((size_t)(vl + nvec) + 63) & ~(size_t)63);",
                   f"    const lm_pro_{short} *pp = (const lm_pro_{short} *)(const void *){p_ptr};",
                   "    #pragma omp parallel for collapse(2) schedule(static) if(par)",
                   f"    for (long long b = 0; b < {nbat}LL; b++)",
                   f"    for (long long r = 0; r < {p_n}; r++) pp->fn(bufs, syms, pp->bi + b, r, 1, 0, K, "
                   f"pm + (b * {p_n} + r) * K, 1);"]
        p_ptr, p_stride, poff = "pm", "K", f"b * {p_n} * K"
    cross = lq % vw != 0  # (vectors that cross into the next run exist)
    itype = "int" if ctype == "float" else "long long"
    masks = [f"    typedef {itype} vI __attribute__((vector_size({vw * (4 if ctype == 'float' else 8)})));",
             f"    vI mk[{vw}];  /* mk[L]: the lanes below L */",
             f"    for (int c = 0; c < {vw}; c++) for (int l = 0; l < {vw}; l++) mk[c][l] = l < c ? -1 : 0;"] \
        if cross else []
    c_at = "cb[(p0 + i) * N + q0 + j]" if side == "b" else "cb[(q0 + j) * N + p0 + i]"
    p1, q1 = f"p0 + {mr} < {p_n} ? p0 + {mr} : {p_n}", f"q0 + {nr} < {q_n} ? q0 + {nr} : {q_n}"
    # (the epilogue's rows: b * M + m, as in the rows form)
    epi = f"epi(bufs, syms, b * M + p0, b * M + ({p1}), q0, {q1})" if side == "b" else \
        f"epi(bufs, syms, b * M + q0, b * M + ({q1}), p0, {p1})"
    lines = [
        "    long long *restrict koff = (long long *)rest;",
        f"    const long long nvec = K / {vw}LL, rem = K % {vw}LL;",
        f"    long long *restrict voff = koff + {q_n}, *restrict voff2 = voff + nvec, *restrict vat = voff2 + nvec;",
        f"    long long *restrict toff = vat + nvec;",
        f"    int *restrict vl = (int *)(toff + {vw});",
        f"    for (long long n = 0; n < {q_n}; n++) koff[n] = {part('row', 'n')};",
        "    for (long long v = 0; v < nvec; v++) {  /* where vector v's lanes are in the copy: one run or two */",
        f"        const long long k0 = v * {vw}LL, c0 = k0 % {lq}LL, k1 = k0 - c0 + {lq}LL;",
        f"        voff[v] = {base} + c0 + {part('k', 'k0')};",
        "        vat[v] = k0;  /* (a table: measured 30 % faster than v * VW in the loop below, GCC 12) */",
        f"        vl[v] = {lq}LL - c0 < {vw} ? (int)({lq}LL - c0) : {vw};",
        f"        voff2[v] = vl[v] < {vw} ? {base} + {part('k', 'k1')} - vl[v] : voff[v];",
        "    }",
        "    for (long long t = 0; t < rem; t++) {  /* the last K % VW elements, one by one */",
        f"        const long long k = nvec * {vw}LL + t;",
        f"        toff[t] = {base} + k % {lq}LL + {part('k', 'k')};",
        "    }",
        *scratch,
        *masks,
        f"    const long long tm = ({p_n} + {mr - 1}) / {mr}, tn = ({q_n} + {nr - 1}) / {nr};",
        "    #pragma omp parallel if(par)",
        "    {",
        "        const long long nt = omp_get_num_threads(), id = omp_get_thread_num();",
        f"        const long long t0 = tm * tn * {nbat}LL * id / nt, t1 = tm * tn * {nbat}LL * (id + 1) / nt;",
        "        int terr = 0;",
        f"        vT *part = (vT *)lm_og_grow(&lm_dc_part, &lm_dc_pcap, (size_t)((t1 - t0) * {mr * nr} + 1) * "
        "sizeof(vT));",
        "        if (!part) terr = 3;",
        f"        for (long long k0 = 0; k0 < (nvec ? nvec : 1) && part; k0 += {chunk}) {{",
        f"            const long long k1 = k0 + {chunk} < nvec ? k0 + {chunk} : nvec;",
        "            for (long long t = t0; t < t1; t++) {",
        "                const long long b = t / (tm * tn), tt = t % (tm * tn), xb = " + boff + ";",
        f"                const long long p0 = tt / tn * {mr}, q0 = tt % tn * {nr};",
        f"                {ctype} *cb = C + b * M * N;",
        f"                const {ctype} *arow[{mr}];",
        f"                long long bo[{nr}];",
        f"                for (int i = 0; i < {mr}; i++)",
        f"                    arow[i] = {p_ptr} + {poff} + (p0 + i < {p_n} ? p0 + i : {p_n} - 1) * {p_stride};",
        f"                for (int j = 0; j < {nr}; j++) bo[j] = xb + koff[q0 + j < {q_n} ? q0 + j : {q_n} - 1];",
        f"                vT acc[{mr}][{nr}];",
        f"                vT *pt = part + (t - t0) * {mr * nr};",
        f"                for (int i = 0; i < {mr}; i++)",
        f"                    for (int j = 0; j < {nr}; j++) acc[i][j] = k0 ? pt[i * {nr} + j] : (vT){{0}};",
        "                for (long long v = k0; v < k1; v++) {",
        f"                    vT a[{mr}], b[{nr}];",
        f"                    for (int i = 0; i < {mr}; i++) a[i] = *(const vT *)(arow[i] + vat[v]);",
    ]
    if cross:
        lines += [
            f"                    if (vl[v] == {vw}) {{",
            f"                        for (int j = 0; j < {nr}; j++) b[j] = *(const vT *)(xp + voff[v] + bo[j]);",
            "                    } else {  /* the lanes from L on: the next run's start */",
            "                        const vI m = mk[vl[v]];",
            f"                        for (int j = 0; j < {nr}; j++)",
            "                            b[j] = (vT)(((vI)*(const vT *)(xp + voff[v] + bo[j]) & m) |",
            "                                        ((vI)*(const vT *)(xp + voff2[v] + bo[j]) & ~m));",
            "                    }"]
    else:
        lines += [f"                    for (int j = 0; j < {nr}; j++) b[j] = *(const vT *)(xp + voff[v] + bo[j]);"]
    lines += [
        f"                    for (int i = 0; i < {mr}; i++)",
        f"                        for (int j = 0; j < {nr}; j++) acc[i][j] += a[i] * b[j];",
        "                }",
        "                if (k1 < nvec) {",
        f"                    for (int i = 0; i < {mr}; i++)",
        f"                        for (int j = 0; j < {nr}; j++) pt[i * {nr} + j] = acc[i][j];",
        "                    continue;",
        "                }",
        f"                for (int i = 0; i < {mr} && p0 + i < {p_n}; i++)",
        f"                    for (int j = 0; j < {nr} && q0 + j < {q_n}; j++) {{",
        f"                        {ctype} s = 0;",
        f"                        for (int l = 0; l < {vw}; l++) s += acc[i][j][l];",
        f"                        for (long long u = 0; u < rem; u++) s += arow[i][nvec * {vw}LL + u] * "
        "xp[toff[u] + bo[j]];",
        f"                        {c_at} = s;",
        "                    }",
        "                if (epi) {",
        f"                    int e = {epi};",
        "                    if (e && !terr) terr = e;",
        "                }",
        "            }",
        "        }",
        *_EPI,
        "    }",
    ]
    return lines


COLS_KC = 128  # the "cols" form's slice of K: its block of A (64 x 128 floats) stays in L1 while the tiles read it
COLS_CHUNK = 16  # tiles (of NB output positions) per chunk: their partial sums stay in the thread's stack


def cols_tile(dtype: DType, m: int) -> tuple[int, int, int]:
    """``(MV, NB, VW)`` of the "cols" form's register tile for ``m`` rows of A: ``MV`` vectors of rows of A (output
    channels) x ``NB`` output positions (``MV * NB`` accumulators: 4 x 6, 2 x 12 or 1 x 24 with 32 vector registers,
    2 x 6 or 1 x 12 with 16), no more vectors than the rows need."""
    vw = vector_bytes() // dtype.itemsize
    need = -(-max(m, 1) // vw)
    if _registers() == 32:
        mv = 4 if need >= 4 else 2 if need >= 2 else 1
        return mv, 24 // mv, vw
    mv = 2 if need >= 2 else 1
    return mv, 12 // mv, vw


def cols_scratch(ctype: str, mr: int, nbat: int) -> str:
    """C bytes of the "cols" form's scratch beyond the copy: A interleaved by ``mr`` rows, and the K offsets."""
    return f"(size_t)({nbat}LL * MB * {mr} * K) * sizeof({ctype}) + (size_t)K * sizeof(long long) + 192"


def cols_loops(part, ctype, vw, base, m, fused_a, batch=None) -> list[str]:
    """The "cols" form: vectors along the rows of A (output channels), each output position's window read one
    element at a time and broadcast: tiles of ``MV`` vectors of rows x ``NB`` positions, whatever the output rows'
    length (rows of 7 or 14 leave no lane idle) and stride (no phases: the copy is read element by element).

    A is interleaved by ``MR = MV * VW`` rows first (by the prologue's pack callback where ``fused_a``). Each
    thread takes a share of the tiles, in chunks of ``COLS_CHUNK``, and runs every block of ``MR`` rows of A over
    each chunk, K in slices of ``COLS_KC`` (the slice of the block in L1 while the chunk's tiles read it), the
    tiles' partial sums kept in the thread's stack between slices; then they are stored into C transposed (one
    output position per accumulator vector) and the epilogue runs on the block's rows and the chunk's columns.
    ``batch`` as for :func:`rows_loops`. (Weight-streaming layers, a few positions against a large A, are not
    taken here: :func:`luminal.codegen.gemm_direct.direct_plan`.)"""
    nbat, boff, aoff = batch or (1, "0", "0")
    mv, nb, _ = cols_tile(DType.float32 if ctype == "float" else DType.float64, m)
    mr, kc, ch = mv * vw, COLS_KC, COLS_CHUNK

    block = [  # one block of rows (b, mb) over the tiles [ta, tb)
        "{",
        f"    const long long m0 = mb * {mr}, m1 = m0 + {mr} < M ? m0 + {mr} : M;",
        "    if (pos_of != b * ntile + ta) {  /* the chunk's positions: pointers into the copy */",
        "        pos_of = b * ntile + ta;",
        f"        const long long xb = {boff};",
        "        for (long long t = ta; t < tb; t++)",
        f"            for (int j = 0; j < {nb}; j++) {{",
        f"                const long long n = t * {nb} + j < N ? t * {nb} + j : N - 1;",
        f"                pos[t - ta][j] = xp + xb + {base} + {part('row', 'n')};",
        "            }",
        "    }",
        f"    for (long long k0 = 0; k0 < K; k0 += {kc}) {{",
        f"        const long long k1 = k0 + {kc} < K ? k0 + {kc} : K;",
        f"        const {ctype} *restrict a = ap + ((b * MB + mb) * K + k0) * {mr};",
        "        for (long long t = ta; t < tb; t++) {",
        f"            vT acc[{mv}][{nb}];",
        f"            const {ctype} *const *p = pos[t - ta];",
        f"            for (int i = 0; i < {mv}; i++)",
        f"                for (int j = 0; j < {nb}; j++)",
        f"                    acc[i][j] = k0 ? *(const vT *)&tt[t - ta][j][i * {vw}] : (vT){{0}};",
        "            for (long long k = k0; k < k1; k++) {",
        f"                vT av[{mv}];",
        f"                for (int i = 0; i < {mv}; i++) av[i] = *(const vT *)(a + (k - k0) * {mr} + i * {vw});",
        "                const long long o = koff[k];",
        f"                for (int j = 0; j < {nb}; j++) {{",
        f"                    const {ctype} s = p[j][o];",
        f"                    for (int i = 0; i < {mv}; i++) acc[i][j] += av[i] * s;",
        "                }",
        "            }",
        f"            for (int i = 0; i < {mv}; i++)",
        f"                for (int j = 0; j < {nb}; j++) *(vT *)&tt[t - ta][j][i * {vw}] = acc[i][j];",
        "        }",
        "    }",
        f"    {ctype} *cb = C + b * M * N;",
        f"    const long long n_lo = ta * {nb}, n_hi = tb * {nb} < N ? tb * {nb} : N;",
        "    for (long long r = m0; r < m1; r++)",
        "        for (long long n = n_lo; n < n_hi; n++)",
        f"            cb[r * N + n] = tt[(n - n_lo) / {nb}][(n - n_lo) % {nb}][r - m0];",
        "    if (epi) {",
        "        int e = epi(bufs, syms, b * M + m0, b * M + m1, n_lo, n_hi);  /* (rows b * M + m: batched) */",
        "        if (e && !terr) terr = e;",
        "    }",
        "}"]
    return [
        "    long long *restrict koff = (long long *)rest;",
        f"    {ctype} *restrict ap = ({ctype} *)(((size_t)(koff + K) + 63) & ~(size_t)63);",
        f"    for (long long k = 0; k < K; k++) koff[k] = {part('k', 'k')};",
        f"    const long long ntile = (N + {nb - 1}) / {nb};",
        *interleave_a(ctype, mr, nbat, aoff, fused_a),
        "    #pragma omp parallel if(par)",
        "    {",
        "        const long long nt = omp_get_num_threads(), id = omp_get_thread_num();",
        f"        {ctype} tt[{ch}][{nb}][{mr}] __attribute__((aligned(64)));",
        f"        const {ctype} *pos[{ch}][{nb}];",
        "        long long pos_of = -1;  /* (the first tile, in all batch elements, whose positions pos holds) */",
        "        int terr = 0;",
        f"        const long long q0 = {nbat}LL * ntile * id / nt, q1 = {nbat}LL * ntile * (id + 1) / nt;",
        "        for (long long q = q0, qe; q < q1; q = qe) {",
        "            const long long b = q / ntile, ta = q % ntile;  /* (a chunk within one batch element) */",
        f"            qe = q + {ch} < q1 ? q + {ch} : q1;",
        "            if (qe > (b + 1) * ntile) qe = (b + 1) * ntile;",
        "            const long long tb = ta + (qe - q);",
        "            for (long long mb = 0; mb < MB; mb++)",
        *["            " + x for x in block],
        "        }",
        *_EPI,
        "    }",
    ]


def split_two(ctype: str, vw: int, dst: str, src: str, n: int, lo: int, inner: int) -> list[str]:
    """C copying one source row of ``n`` elements into its two phases (a stride-2 convolution's copy): padded
    position ``p = c + lo`` of element ``c`` goes to phase ``p % 2`` at ``p / 2``, so the even elements land in one
    phase row from ``lo / 2`` on and the odd ones in the other from ``(lo + 1) / 2``. Two vectors at a time, split
    into their even and odd lanes by one shuffle each (the element-by-element loop cost a strided depthwise
    convolution most of its time), the last elements one by one."""
    evens = ", ".join(str(2 * i) for i in range(vw))
    odds = ", ".join(str(2 * i + 1) for i in range(vw))
    return [
        "            {",
        f"            {ctype} *restrict de = {dst} + {lo % 2 * inner}LL + {lo // 2}LL;  /* the even elements */",
        f"            {ctype} *restrict dd = {dst} + {(lo + 1) % 2 * inner}LL + {(lo + 1) // 2}LL;",
        f"            const {ctype} *restrict s = {src};",
        "            long long j = 0;",
        "#if defined(__clang__) || __GNUC__ >= 12  /* (__builtin_shufflevector) */",
        f"            for (; 2 * j + {2 * vw} <= {n}; j += {vw}) {{",
        "                const vT v0 = *(const vT *)(s + 2 * j), v1 = *(const vT *)(s + 2 * j + " + str(vw) + ");",
        f"                *(vT *)(de + j) = __builtin_shufflevector(v0, v1, {evens});",
        f"                *(vT *)(dd + j) = __builtin_shufflevector(v0, v1, {odds});",
        "            }",
        "#endif",
        f"            for (; 2 * j < {n}; j++) {{",
        "                de[j] = s[2 * j];",
        f"                if (2 * j + 1 < {n}) dd[j] = s[2 * j + 1];",
        "            }",
        "            }"]
