"""The streaming GEMM: ``C = A . B`` with A read where it is stored (contiguous along K, or along M: transposed)
and B contiguous along N (or along K: PyTorch's ``N x K`` weight, its blocks copied transposed), each element of A
broadcast against vectors of a row of B; nothing of A is packed.

This is the shape of a convolution lowered to im2col + GEMM (A: the ``Cout x Cin*kh*kw`` weight in PyTorch's
layout, B: the ``K x positions`` column matrix), of an activation times a ``K x N`` weight (ONNX MatMul), of a
linear layer's input gradient (``dY . W``) and weight gradient (``dY^T . X``: A transposed), and of two row-major
matrices. A packing GEMM copies A into panels on every call: with the few positions of a late ResNet stage (512 x
16 x 4608 at batch 1) the weight is read twice from memory and OpenBLAS ran at 90-100 GFLOP/s; streamed once it
ran at 165 (0.77 -> 0.46 ms). Measured on the 2-core Zen 4 (AVX-512) against OpenBLAS split over the threads
(``lm_gemm_f32``): 1.0-1.7x from 96 rows at every N from 16 and K from 16 to 4608 (2048^3 included), behind only
where lanes idle (8 columns: 2x) or there is little work for few rows; the rule ``"auto"`` applies is in
:mod:`.gemm_small` (``stream_fits``), the numbers in docs/cpu_backend.md.

Structure (:func:`stream_source`): the threads split M into blocks of the tile's rows where B is the smaller
operand (N <= M: each thread copies all of B), else (or below ``LM_STREAM_SPLIT_ROWS`` rows per thread) N into
column blocks, each thread reading all of A in place. Per K block of ``LM_STREAM_BBYTES`` bytes of B and per column
block (``4 * W`` columns, W lanes per vector; with fewer than ``LM_STREAM_FIT_ROWS`` rows as wide as the tile that
wastes the fewest rows) each thread copies that block of B into an aligned buffer (zero-padded to whole vectors)
(B stored ``N x K``: transposed on the way, 4 x 4 register blocks, the own GEMM's ``lm_og_packt_*``; a linear
layer's forward with PyTorch's weight layout, 1024 x 1024 x 256: OpenBLAS 188, streamed 212 GFLOP/s)
and runs a register tile of ``mr`` rows x ``nv`` vectors (:data:`TILES`: 16 x 1, 12 x 2, 8 x 3 or 6 x 4 with 32
vector registers) along the whole K block, reading its ``mr`` rows of A straight from memory, one element per row
and step, broadcast by the FMA itself (A transposed: ``mr`` consecutive elements of a row of A^T per step, each
tile then serving up to ``LM_STREAM_SUPER`` column blocks of B copied together). While a block's tiles run, each
prefetches into L2 its share of the *next* block of B (``NAME_pfplan``: a few lines per step of its K loop, so
the multiply-adds hide the fetches), so the next copy does not wait on memory: with B (a weight) from memory,
``python benchmarks/gemm_small.py --cold-b 96``, 32 x 1536 x 384 went 124-133 -> 159-172 GFLOP/s, 32 x 384 x 1536
137 -> 152-156, 128 x 768 x 256 170 -> 185-189 (2-core Zen 4; from cache unchanged within noise). Rows of
a thread's last tile that do not exist are copied with zeros (never read past A). The epilogue runs on each
thread's block of C as soon as its last K block is done.
"""

from __future__ import annotations

import os
import re

from .gemm import _COMMON, _PACKT, store_cols
from .gemm_config import _width, vector_bytes

# rows of the register tile by vectors of columns: mr * nv accumulators, plus nv vectors of B, within the
# vector registers (32 with AVX-512, else 16)
TILES = {64: {1: 16, 2: 12, 3: 8, 4: 6}, 32: {1: 8, 2: 6, 3: 4, 4: 3}, 16: {1: 8, 2: 6, 3: 4, 4: 3}}
NV_MAX = 4  # vectors of columns per column block


def prefetch_default() -> str:
    """``LM_STREAM_PREFETCH``'s default in the rendered C: ``"1"``, or ``"0"`` under ``LUMINAL_GEMM_PREFETCH=0``
    (the streaming and dot-product kernels then prefetch only what they did before: for A/B measurements)."""
    mode = os.environ.get("LUMINAL_GEMM_PREFETCH", "1") or "1"
    if mode not in ("0", "1"):
        raise ValueError(f"LUMINAL_GEMM_PREFETCH={mode!r}: expected '1' (the default) or '0'")
    return mode


def stream_tile(dtype: str) -> dict[int, int]:
    """Rows of the register tile per number of column vectors (1..4) at this machine's vector width."""
    _width(dtype)
    return dict(TILES[vector_bytes()])


_PF = r"""
#ifndef LM_PF_DEFINED
#define LM_PF_DEFINED
/* rows of a block of B the tiles prefetch while they compute on the block before it: `rows` rows of `lines` cache
   lines from p, `stride` bytes apart, `per` lines per step of a tile's K loop */
typedef struct { const char *p; long long stride, lines, rows; int per; } lm_pf;
#endif
"""

_TILE = r"""
/* rows [0, rows) and columns [0, cols) of c (+)= the MR rows at a (element (r, k) at AT) . the kb x NVW block at
   bp (rows NVW apart, VB-aligned) */
static __attribute__((noinline)) void NAME_tileNV(long long kb, const T *a, long long lda, const T *bp, T *restrict c,
                                                  long long ldc, int rows, int cols, int acc, const lm_pf *pf) {
    bp = (const T *)__builtin_assume_aligned(bp, VB);
    const char *pr = pf->p, *pq = pr;  /* `per` lines of the next block of B per step, into L2 (NAME_pfplan) */
    long long pl = pf->lines, left = pf->rows;
    const int per = pf->per;
DECLS
    for (long long k = 0; k < kb; k++) {
LOADS
BODY
        for (int q = 0; q < per && left; q++) {
            __builtin_prefetch(pq, 0, 2);
            pq += 64;
            if (--pl == 0) { pr += pf->stride; pq = pr; pl = pf->lines; left--; }
        }
    }
STORES
}
"""

_MAIN = r"""
__attribute__((weak, visibility("hidden"))) __thread void *NAME_bbuf, *NAME_abuf;
__attribute__((weak, visibility("hidden"))) __thread size_t NAME_bcap, NAME_acap;
__attribute__((weak, visibility("hidden"))) void NAME_release(void) {
    free(NAME_bbuf); free(NAME_abuf); NAME_bbuf = NAME_abuf = NULL; NAME_bcap = NAME_acap = 0;
}
#ifndef LM_STREAM_PREFETCH  /* 0: no prefetch of the next block of B (B from memory then waits for each copy) */
#define LM_STREAM_PREFETCH PFDEFAULT
#endif
/* the share [i, i + 1) of `tiles` of the block of B (columns n0 .. n0 + cols, K rows pc .. pc + kb) as prefetch
   rows for a tile of `steps` steps */
static lm_pf NAME_pfplan(const T *B, long long sbn, long long sbk, int bt, long long n0, long long cols,
                         long long pc, long long kb, long long i, long long tiles, long long steps) {
    lm_pf f = {0, 0, 1, 0, 0};
    if (!LM_STREAM_PREFETCH || cols <= 0 || kb <= 0 || tiles <= 0 || steps <= 0) return f;
    long long rows = bt ? cols : kb, len = (bt ? kb : cols) * (long long)sizeof(T);
    long long r0 = rows * i / tiles, r1 = rows * (i + 1) / tiles;
    if (r1 <= r0) return f;
    f.stride = (bt ? sbn : sbk) * (long long)sizeof(T);
    f.p = (const char *)(B + (bt ? (n0 + r0) * sbn + pc : (pc + r0) * sbk + n0));
    f.lines = (len + 63) / 64 + 1;  /* (a row need not start on a line) */
    f.rows = r1 - r0;
    f.per = (int)((f.lines * f.rows + steps - 1) / steps);
    return f;
}
#ifndef LM_STREAM_BBYTES
#define LM_STREAM_BBYTES (128 << 10)  /* bytes of the block of B each thread copies (kept in L2) */
#endif
#ifndef LM_STREAM_SPLIT_ROWS  /* the threads split M from this many rows per thread on, else N */
#define LM_STREAM_SPLIT_ROWS 64
#endif
#ifndef LM_STREAM_FIT_ROWS  /* below this many rows the column blocks are as wide as fits M best */
#define LM_STREAM_FIT_ROWS 64
#endif
#ifndef LM_STREAM_SUPER  /* column blocks of B copied together where A is transposed: each tile of A, read once,
                            serves all of them (a tile's step reads a part of a line of A^T) */
#define LM_STREAM_SUPER 4
#endif
static int NAME(long long M, long long N, long long K, const T *A, long long sam, long long sak,
                const T *B, long long sbn, long long sbk, T *C, lm_epilogue epi, void **bufs,
                const long long *syms) {
    if (M <= 0 || N <= 0 || K <= 0 || (sak != 1 && sam != 1) || (sbn != 1 && sbk != 1))
        return FALLBACK(M, N, K, A, sam, sak, B, sbn, sbk, C, epi, bufs, syms);
    const int at = sak != 1;  /* A stored transposed (contiguous along M: a weight gradient's dY^T) */
    const int bt = sbn != 1;  /* B stored N x K (PyTorch's weight layout): its blocks are copied transposed */
    static const int mrs[NVMAX + 1] = {MRS};
    int err = 0;
    /* column blocks of NVMAX vectors; with few rows, of the width whose tile wastes the fewest rows (32 rows:
       4 tiles of 8 x 3 vectors, not 6 of 6 x 4 with 4 rows of zeros) */
    long long cbw = NVMAX * W;
    if (M < LM_STREAM_FIT_ROWS) {
        double best = 2;
        for (int v = NVMAX; v >= 1; v--) {
            double all = (double)((M + mrs[v] - 1) / mrs[v] * mrs[v]), waste = (all - (double)M) / all;
            if (waste < best) { best = waste; cbw = (long long)v * W; }
        }
    }
    long long vmax = ((N < cbw ? N : cbw) + W - 1) / W;
    const long long sup = at ? LM_STREAM_SUPER : 1;  /* (A in rows: one block; measured no better with more) */
    long long span = (N + W - 1) / W * W < sup * cbw ? (N + W - 1) / W * W : sup * cbw;
    long long kc = LM_STREAM_BBYTES / (long long)(span * sizeof(T));  /* (B's copied block: kc x span) */
    if (kc < 16) kc = 16;
    #pragma omp parallel if(!omp_in_parallel() && (double)M * (double)N * (double)K >= (double)LM_OWN_GEMM_PAR_MACS)
    {
        long long nt = omp_get_num_threads(), t = omp_get_thread_num(), unit = mrs[vmax];
        long long lo = 0, hi = M, c0 = 0, c1 = N;
        long long cblocks = (N + cbw - 1) / cbw;
        /* rows (in blocks of the widest tile's) where B is the smaller operand: each thread copies all of B's
           blocks; else columns, each thread reading all of A in place (a BERT FFN's 128 x 384 x 1536 with a K x N
           weight: 0.93 -> 0.80 ms) */
        if ((M >= LM_STREAM_SPLIT_ROWS * nt && N <= M) || cblocks < nt) {
            long long blocks = (M + unit - 1) / unit;
            lo = blocks * t / nt * unit;
            hi = blocks * (t + 1) / nt * unit;
            if (hi > M) hi = M;
        } else {  /* columns, in whole column blocks */
            c0 = cblocks * t / nt * cbw;
            c1 = cblocks * (t + 1) / nt * cbw;
            if (c1 > N) c1 = N;
            if (c0 >= c1) hi = lo;
        }
        T *bp = hi > lo ? (T *)lm_og_grow(&NAME_bbuf, &NAME_bcap, (size_t)(kc * span) * sizeof(T)) : NULL;
        T *ap = hi > lo ? (T *)lm_og_grow(&NAME_abuf, &NAME_acap, (size_t)(MRMAX * kc) * sizeof(T)) : NULL;
        if (hi > lo && (!bp || !ap)) {  /* no memory for the copies: plain loops over this thread's block */
            for (long long m = lo; m < hi; m++)
                for (long long n = c0; n < c1; n++) {
                    T s = 0;
                    for (long long k = 0; k < K; k++) s += A[m * sam + k * sak] * B[n + k * sbk];
                    C[m * N + n] = s;
                }
            int e = epi ? epi(bufs, syms, lo, hi, c0, c1) : 0;
            if (e) {
                #pragma omp critical(lm_own_gemm_err)
                { if (!err) err = e; }
            }
            hi = lo;
        }
        for (long long pc = 0; pc < K && hi > lo; pc += kc) {
            long long kb = K - pc < kc ? K - pc : kc;
            /* super blocks: up to `sup` whole column blocks (then what is left, one block of fewer vectors); each
               tile of A is read once for all of them */
            for (long long s0 = c0, s1; s0 < c1; s0 = s1) {
                long long whole = (c1 - s0) / cbw, nblk = whole > sup ? sup : whole;
                int nv = whole ? (int)(cbw / W) : (int)((c1 - s0 + W - 1) / W), mr = mrs[nv];
                long long ldp = (long long)nv * W;
                if (!whole) nblk = 1;
                s1 = whole ? s0 + nblk * cbw : c1;
                for (long long b = 0; b < nblk; b++) {
                    long long n0 = s0 + b * cbw, cols = s1 - n0 < ldp ? s1 - n0 : ldp;
                    T *bb = bp + b * kb * ldp;
                    if (bt) {  /* rows n0.. of B, contiguous along K: 4 x 4 (f64: 2 x 2) register transposes */
                        lm_og_packt_T(cols, kb, B + n0 * sbn + pc, sbn, bb, ldp);
                        for (long long k = 0; k < kb; k++)
                            for (long long j = cols; j < ldp; j++) bb[k * ldp + j] = 0;
                    } else
                        for (long long k = 0; k < kb; k++) {
                            memcpy(bb + k * ldp, B + (pc + k) * sbk + n0, (size_t)cols * sizeof(T));
                            /* (never stored: no stale NaN) */
                            for (long long j = cols; j < ldp; j++) bb[k * ldp + j] = 0;
                        }
                }
                /* the next super block (or the first of the next K block): prefetched a share per tile */
                long long pn0 = s1, pk0 = pc, pkb = kb, ti = 0;
                if (pn0 >= c1) { pn0 = c0; pk0 = pc + kb; pkb = K - pk0 < kc ? K - pk0 : kc; }
                long long pcols = c1 - pn0 < sup * cbw ? c1 - pn0 : sup * cbw;
                long long ntiles = (hi - lo + mr - 1) / mr * nblk;
                if (pk0 >= K) pcols = 0;
                for (long long m = lo; m < hi; m += mr) {
                    int rows = hi - m < mr ? (int)(hi - m) : mr;
                    const T *a = A + m * sam + pc * sak;
                    long long lda = at ? sak : sam;
                    int ta = at;
                    if (rows < mr) {  /* the last rows: a zero-padded copy (K-contiguous), so the tile reads no row
                                         past A */
                        for (int r = 0; r < mr; r++) {
                            if (r >= rows) memset(ap + r * kb, 0, (size_t)kb * sizeof(T));
                            else if (!at) memcpy(ap + r * kb, a + r * sam, (size_t)kb * sizeof(T));
                            else for (long long k = 0; k < kb; k++) ap[r * kb + k] = a[r + k * sak];
                        }
                        a = ap;
                        lda = kb;
                        ta = 0;
                    }
                    for (long long b = 0; b < nblk; b++) {
                        long long n0 = s0 + b * cbw;
                        int cols = s1 - n0 < ldp ? (int)(s1 - n0) : (int)ldp;
                        const T *bb = bp + b * kb * ldp;
                        T *c = C + m * N + n0;
                        lm_pf pf = NAME_pfplan(B, sbn, sbk, bt, pn0, pcols, pk0, pkb, ti++, ntiles, kb);
                        switch (nv) {
CASES
                        }
                    }
                }
                if (epi && pc + kb >= K) {
                    int e = epi(bufs, syms, lo, hi, s0, s1);
                    if (e) {
                        #pragma omp critical(lm_own_gemm_err)
                        { if (!err) err = e; }
                    }
                }
            }
        }
    }
    return err;
}
"""


def _tile(nv: int, mr: int, transposed: bool) -> str:
    elem = "a[k * lda + {r}]" if transposed else "a[{r} * lda + k]"  # (row r, step k of A)
    decls = ["    NAME_v " + ", ".join(f"c{r}_{j} = {{0}}" for j in range(nv)) + ";" for r in range(mr)]
    loads = ["        const NAME_v " + ", ".join(f"y{j} = *(const NAME_v *)(bp + k * NVW + {j} * W)"
                                              for j in range(nv)) + ";"]
    body = [f"        {{ const T x = {elem.format(r=r)}; " + " ".join(f"c{r}_{j} += x * y{j};" for j in range(nv))
            + " }" for r in range(mr)]
    stores = []
    for r in range(mr):
        stores.append(f"    if (rows > {r}) {{")
        stores.append(f"        T *cr = c + {r} * ldc;")
        stores.append("        if (cols == NVW) {")
        for j in range(nv):
            stores.append(f"            {{ NAME_v o; if (acc) {{ memcpy(&o, cr + {j} * W, VB); o += c{r}_{j}; }}"
                          f" else o = c{r}_{j}; memcpy(cr + {j} * W, &o, VB); }}")
        stores.append("        } else {")
        stores.append("            T s[NVW]; " + " ".join(f"memcpy(s + {j} * W, &c{r}_{j}, VB);" for j in range(nv)))
        stores.append("            lm_og_store_cols_T(cr, s, cols, acc);")
        stores.append("        }")
        stores.append("    }")
    text = (_TILE.replace("DECLS", "\n".join(decls)).replace("LOADS", "\n".join(loads)).replace("BODY", "\n".join(body))
            .replace("STORES", "\n".join(stores)).replace("NVW", f"({nv} * W)").replace("AT", elem.format(r="r")))
    return text.replace("tileNV", f"tile{nv}{'t' if transposed else ''}").replace("MR rows", f"{mr} rows")


def stream_source(dtype: str, name: str, fallback: str) -> str:
    """C source of ``static int NAME(M, N, K, A, sam, sak, B, sbn, sbk, C, epi, bufs, syms)`` with the semantics
    of ``lm_gemm_f32`` (:mod:`luminal.codegen.c_support`): the streaming GEMM for A contiguous along K (``sak ==
    1``) or along M (``sam == 1``: read transposed, a weight gradient's ``dY^T``) and B contiguous along N (``sbn ==
    1``) or K (``sbk == 1``: copied transposed), M or N split over the threads from ``LM_OWN_GEMM_PAR_MACS``
    multiply-adds on (outside a parallel region). Other layouts, and M, N or K of zero, call ``fallback`` (a
    function with the same signature rendered before this text). The text starts with the own GEMM's common header
    (include-guarded: its buffer allocator and thresholds)."""
    for n in (name, fallback):
        if not re.fullmatch(r"[A-Za-z_]\w*", n):
            raise ValueError(f"not a C identifier: {n!r}")
    w = _width(dtype)
    tiles = stream_tile(dtype)
    ctype = "float" if dtype == "float32" else "double"
    call = "NAME_tile{nv}{t}(kb, a, lda, bb, c, N, rows, cols, pc > 0, &pf)"
    cases = [f"                        case {nv}: if (ta) {call.format(nv=nv, t='t')}; else {call.format(nv=nv, t='')};"
             f" break;" for nv in range(1, NV_MAX)]
    cases.append(f"                        default: if (ta) {call.format(nv=NV_MAX, t='t')}; "
                 f"else {call.format(nv=NV_MAX, t='')}; break;")
    src = (_PF + "typedef T NAME_v __attribute__((vector_size(VB)));\n"
           + "".join(_tile(nv, tiles[nv], t) for nv in range(1, NV_MAX + 1) for t in (False, True))
           + _MAIN.replace("CASES", "\n".join(cases)))
    subs = {"W": str(w), "VB": str(vector_bytes()), "T": ctype, "FALLBACK": fallback, "NVMAX": str(NV_MAX),
            "MRS": ", ".join(["0"] + [str(tiles[nv]) for nv in range(1, NV_MAX + 1)]),
            "MRMAX": str(max(tiles.values())),
            "PFDEFAULT": prefetch_default()}
    src = src.replace("packt_T", "packt_" + ctype).replace("store_cols_T", "store_cols_" + ctype)
    src = re.sub(r"\b(W|VB|T|FALLBACK|NVMAX|MRS|MRMAX|PFDEFAULT)\b", lambda m: subs[m.group(1)], src)
    return _COMMON + "#include <string.h>\n" + _PACKT[ctype] + store_cols(ctype) + re.sub(r"\bNAME", name, src)
