"""Luminal's own GEMM, generated as C: GotoBLAS/BLIS-style packing and a register-blocked microkernel.

``own_gemm_source(dtype, cfg, name)`` renders one function with the signature and semantics of
``lm_gemm_f32`` / ``lm_gemm_f64`` (see :mod:`luminal.codegen.c_support`)::

    static int NAME(long long M, long long N, long long K, const T *A, long long sam, long long sak,
                    const T *B, long long sbn, long long sbk, T *C, lm_epilogue epi, void **bufs,
                    const long long *syms);

    C[m*N + n] = sum_k A[m*sam + k*sak] * B[n*sbn + k*sbk]

Structure (per thread, over its block of C): ``jc`` (``nc`` columns) -> ``pc`` (``kc`` of K) -> pack the B panel
(``kc x nc`` in ``nr``-wide slivers, zero-padded) -> ``ic`` (``mc`` rows) -> pack the A block (``mc x kc`` in
``mr``-row slivers, zero-padded) -> ``jr`` -> ``ir`` -> the ``mr x nr`` microkernel, whose accumulators are
GCC vector-extension registers (``mr * nr / W`` of them, ``W`` the vector width in elements: 6x16 f32 on AVX2
is 12 ymm accumulators fed by ``vbroadcastss`` + ``vfmadd231ps``) and whose loads come from the packed, 64-byte
aligned buffers. Packing reads the operands through their strides, so transposed, strided and broadcast
(stride 0) operands cost nothing extra; the common layouts have fast paths (row-major B: a few rows at a time
along all slivers; row-major A and N x K B: 4x4 / 2x2 register transposes; K x M A: each row read once). The
first K block stores into C, the later ones add, so C is never zeroed first. Edge tiles are computed into a
local tile and the valid part copied. Matrix-vector products (M == 1 or N == 1) skip the packing: row-wise
axpy or four-row dot products straight from the operands (the output split over the threads).

Threads (OpenMP), outside a parallel region and from ``LM_OWN_GEMM_PAR_MACS`` multiply-adds on:

* from ``LM_OWN_GEMM_SHARED_MACS`` on (and ``LM_OWN_GEMM_SHARED_ROWS`` rows per thread), the threads split M and share one B panel per
  ``(jc, pc)``: each packs its share of the slivers, a barrier, each computes its rows, a barrier. No operand
  is packed twice.
* smaller GEMMs split the longer side (M in ``mr`` rows or N in ``nr`` columns), each thread with its own
  panels and no barriers.

Packing buffers are thread-local, 64-byte aligned and reused across calls (grown, never freed). Inside a
parallel region (batched GEMMs spread by the caller) a call runs single-threaded and touches no barrier.
The epilogue runs on each block of ``mc`` rows x about ``LM_OWN_GEMM_EPI_COLS`` (256) columns of C as soon as
its last K block is stored, while it is still in L1/L2; every element is seen exactly once.

The header (``#include <stdlib.h>``, the thread-local buffers, the thresholds as overridable macros) and the
per-dtype transposing packers are shared between all generated GEMMs behind include guards, and every other
helper is prefixed by ``NAME``, so any number of GEMMs (configs, dtypes) can live in one translation unit. The
source expects ``HELPERS`` and ``gemm_helpers()`` of ``c_support`` before it (``math.h``, ``string.h``,
``omp.h``, ``lm_epilogue``, ``lm_epilogue_all``).
"""

from __future__ import annotations

import re

from .gemm_config import _CTYPE, GemmConfig, _width, vector_bytes
from .gemm_config import candidate_configs, default_config  # noqa: F401  (public: also importable from here)


_COMMON = r"""
#ifndef LM_OWN_GEMM_COMMON
#define LM_OWN_GEMM_COMMON
#include <stdlib.h>
/* GEMMs of fewer multiply-adds than this run on one thread (waking the pool costs more) */
#ifndef LM_OWN_GEMM_PAR_MACS
#define LM_OWN_GEMM_PAR_MACS (1LL << 18)
#endif
/* the epilogue runs on blocks of (mc rows) x (about this many columns) of C, as soon as they are final */
#ifndef LM_OWN_GEMM_EPI_COLS
#define LM_OWN_GEMM_EPI_COLS 256
#endif
/* from this many multiply-adds on, the threads share the packed B panels (synchronized by barriers) */
#ifndef LM_OWN_GEMM_SHARED_MACS
#define LM_OWN_GEMM_SHARED_MACS (1LL << 24)
#endif
/* ... and from this many rows per thread on (below it, at M <= 128 on 2 cores, sharing the panel cost 25-40 %:
   each thread reads half of every panel from the other core's cache) */
#ifndef LM_OWN_GEMM_SHARED_ROWS
#define LM_OWN_GEMM_SHARED_ROWS 128
#endif
/* Packing buffers of the own GEMMs: per thread, 64-byte aligned, grown on demand and reused by every later
   call on that thread (freed by luminal_release: luminal.codegen.c_support.with_release). */
__attribute__((weak, visibility("hidden"))) __thread void *lm_og_abuf, *lm_og_bbuf;
__attribute__((weak, visibility("hidden"))) __thread size_t lm_og_acap, lm_og_bcap;
__attribute__((weak, visibility("hidden"))) void lm_release_og(void) {
    free(lm_og_abuf); free(lm_og_bbuf); lm_og_abuf = lm_og_bbuf = NULL; lm_og_acap = lm_og_bcap = 0;
}
static void *lm_og_grow(void **buf, size_t *cap, size_t bytes) {
#ifdef LM_OWN_GEMM_EXACT_BUFFERS  /* (tests) a buffer of exactly the size asked for, so ASan sees any overrun */
    if (bytes != *cap || !*buf) {
#else
    bytes = (bytes + 4095) & ~(size_t)4095;
    if (bytes > *cap || !*buf) {
#endif
        void *p = NULL;
        if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) return NULL;
        free(*buf);
        *buf = p;
        *cap = bytes;
    }
    return *buf;
}
#endif
"""

def store_cols(ctype: str) -> str:
    """C of ``lm_og_store_cols_<ctype>(c, s, cols, acc)`` (include-guarded): ``c[j] = acc ? c[j] + s[j] : s[j]`` for
    ``j < cols``, a register tile's partial last columns. Out of line on purpose: written into every row of every
    tile, gcc vectorized one copy per row (84 in the float streaming and dot kernels: 60 % of the GEMM library's
    machine code and half of its compile time, 1.7 -> 0.8 s); only a product's last column block takes it."""
    guard = f"LM_OWN_GEMM_STORE_COLS_{ctype.replace(' ', '_')}"
    return (f"#ifndef {guard}\n#define {guard}\n"
            f"static __attribute__((noinline, unused)) void lm_og_store_cols_{ctype}({ctype} *restrict c, "
            f"const {ctype} *restrict s, int cols, int acc) {{\n"
            f"    for (int j = 0; j < cols; j++) c[j] = acc ? c[j] + s[j] : s[j];\n}}\n#endif\n")


# dst[k*W + i] = src[i*rs + k] for i < R, k < kb: R rows that are contiguous along k, transposed in 4x4 (float)
# or 2x2 (double) register blocks; W is a compile-time constant at every (always inlined) use.
_PACKT = {
    "float": r"""
#ifndef LM_OWN_GEMM_PACKT_float
#define LM_OWN_GEMM_PACKT_float
typedef float lm_og_v4f __attribute__((vector_size(16)));
typedef int lm_og_v4i __attribute__((vector_size(16)));
static inline __attribute__((always_inline)) void lm_og_packt_float(long long R, long long kb, const float *src,
                                                                    long long rs, float *restrict dst, long long W) {
    long long i = 0;
    for (; i + 4 <= R; i += 4) {
        const float *s0 = src + i * rs, *s1 = s0 + rs, *s2 = s1 + rs, *s3 = s2 + rs;
        float *restrict d = dst + i;
        long long k = 0;
        for (; k + 4 <= kb; k += 4) {
            lm_og_v4f r0, r1, r2, r3;
            if (!(k & 15)) {
                __builtin_prefetch(s0 + k + 128); __builtin_prefetch(s1 + k + 128);
                __builtin_prefetch(s2 + k + 128); __builtin_prefetch(s3 + k + 128);
            }
            memcpy(&r0, s0 + k, 16); memcpy(&r1, s1 + k, 16); memcpy(&r2, s2 + k, 16); memcpy(&r3, s3 + k, 16);
            lm_og_v4f t0 = __builtin_shuffle(r0, r1, (lm_og_v4i){0, 4, 1, 5});
            lm_og_v4f t1 = __builtin_shuffle(r0, r1, (lm_og_v4i){2, 6, 3, 7});
            lm_og_v4f t2 = __builtin_shuffle(r2, r3, (lm_og_v4i){0, 4, 1, 5});
            lm_og_v4f t3 = __builtin_shuffle(r2, r3, (lm_og_v4i){2, 6, 3, 7});
            lm_og_v4f o0 = __builtin_shuffle(t0, t2, (lm_og_v4i){0, 1, 4, 5});
            lm_og_v4f o1 = __builtin_shuffle(t0, t2, (lm_og_v4i){2, 3, 6, 7});
            lm_og_v4f o2 = __builtin_shuffle(t1, t3, (lm_og_v4i){0, 1, 4, 5});
            lm_og_v4f o3 = __builtin_shuffle(t1, t3, (lm_og_v4i){2, 3, 6, 7});
            memcpy(d + k * W, &o0, 16); memcpy(d + (k + 1) * W, &o1, 16);
            memcpy(d + (k + 2) * W, &o2, 16); memcpy(d + (k + 3) * W, &o3, 16);
        }
        for (; k < kb; k++) { d[k * W] = s0[k]; d[k * W + 1] = s1[k]; d[k * W + 2] = s2[k]; d[k * W + 3] = s3[k]; }
    }
    for (; i + 2 <= R; i += 2) {
        const float *s0 = src + i * rs, *s1 = s0 + rs;
        float *restrict d = dst + i;
        long long k = 0;
        for (; k + 4 <= kb; k += 4) {
            lm_og_v4f r0, r1;
            if (!(k & 15)) { __builtin_prefetch(s0 + k + 128); __builtin_prefetch(s1 + k + 128); }
            memcpy(&r0, s0 + k, 16); memcpy(&r1, s1 + k, 16);
            lm_og_v4f u0 = __builtin_shuffle(r0, r1, (lm_og_v4i){0, 4, 1, 5});
            lm_og_v4f u1 = __builtin_shuffle(r0, r1, (lm_og_v4i){2, 6, 3, 7});
            memcpy(d + k * W, &u0, 8); memcpy(d + (k + 1) * W, (const char *)&u0 + 8, 8);
            memcpy(d + (k + 2) * W, &u1, 8); memcpy(d + (k + 3) * W, (const char *)&u1 + 8, 8);
        }
        for (; k < kb; k++) { d[k * W] = s0[k]; d[k * W + 1] = s1[k]; }
    }
    for (; i < R; i++)
        for (long long k = 0; k < kb; k++) dst[k * W + i] = src[i * rs + k];
}
#endif
""",
    "double": r"""
#ifndef LM_OWN_GEMM_PACKT_double
#define LM_OWN_GEMM_PACKT_double
typedef double lm_og_v2d __attribute__((vector_size(16)));
typedef long long lm_og_v2l __attribute__((vector_size(16)));
static inline __attribute__((always_inline)) void lm_og_packt_double(long long R, long long kb, const double *src,
                                                                     long long rs, double *restrict dst, long long W) {
    long long i = 0;
    for (; i + 2 <= R; i += 2) {
        const double *s0 = src + i * rs, *s1 = s0 + rs;
        double *restrict d = dst + i;
        long long k = 0;
        for (; k + 2 <= kb; k += 2) {
            lm_og_v2d r0, r1;
            memcpy(&r0, s0 + k, 16); memcpy(&r1, s1 + k, 16);
            lm_og_v2d o0 = __builtin_shuffle(r0, r1, (lm_og_v2l){0, 2});
            lm_og_v2d o1 = __builtin_shuffle(r0, r1, (lm_og_v2l){1, 3});
            memcpy(d + k * W, &o0, 16); memcpy(d + (k + 1) * W, &o1, 16);
        }
        for (; k < kb; k++) { d[k * W] = s0[k]; d[k * W + 1] = s1[k]; }
    }
    for (; i < R; i++)
        for (long long k = 0; k < kb; k++) dst[k * W + i] = src[i * rs + k];
}
#endif
""",
}

# The matrix-vector rows kernel (M == 1 or N == 1, no packing): part of every own GEMM, and of the stand-alone
# GEMV of :mod:`luminal.codegen.gemm_small`. Expects ``NAME_v`` (a vector of VB bytes) and ``T``.
GEMV_ROWS = r"""/* a matrix-vector product (M == 1 or N == 1), no packing: out[i] = sum_k X[i*sxi + k*sxk] * y[k*sy] for i in
   [i0, i1) (out = C, contiguous either way) */
static void NAME_gemv(long long i0, long long i1, long long K, const T *X, long long sxi, long long sxk,
                      const T *y, long long sy, T *restrict out) {
    if (sxi == 1) {  /* out += y[k] * (row k of X): four rows at a time over blocks of out that stay in L1 */
        for (long long b0 = i0; b0 < i1; b0 += 2048) {
            long long b1 = b0 + 2048 < i1 ? b0 + 2048 : i1, k = 0;
            for (long long i = b0; i < b1; i++) out[i] = 0;
            for (; k + 4 <= K; k += 4) {
                T y0 = y[k * sy], y1 = y[(k + 1) * sy], y2 = y[(k + 2) * sy], y3 = y[(k + 3) * sy];
                const T *x0 = X + k * sxk, *x1 = x0 + sxk, *x2 = x1 + sxk, *x3 = x2 + sxk;
                for (long long i = b0; i < b1; i++) out[i] += y0 * x0[i] + y1 * x1[i] + y2 * x2[i] + y3 * x3[i];
            }
            for (; k < K; k++) {
                T y0 = y[k * sy]; const T *x0 = X + k * sxk;
                for (long long i = b0; i < b1; i++) out[i] += y0 * x0[i];
            }
        }
    } else if (sxk == 1 && sy == 1) {  /* dot products along contiguous K: four rows at a time (four streams,
                                          one load of y for four FMAs), two vector accumulators per row */
        enum { W = VB / sizeof(T) };
        long long i = i0;
        for (; i + 4 <= i1; i += 4) {
            const T *x0 = X + i * sxi, *x1 = x0 + sxi, *x2 = x1 + sxi, *x3 = x2 + sxi;
            NAME_v a00 = {0}, a01 = {0}, a10 = {0}, a11 = {0}, a20 = {0}, a21 = {0}, a30 = {0}, a31 = {0};
            long long k = 0;
            for (; k + 2 * W <= K; k += 2 * W) {
                NAME_v v0, v1, u0, u1;
                memcpy(&v0, y + k, VB); memcpy(&v1, y + k + W, VB);
                memcpy(&u0, x0 + k, VB); memcpy(&u1, x0 + k + W, VB); a00 += u0 * v0; a01 += u1 * v1;
                memcpy(&u0, x1 + k, VB); memcpy(&u1, x1 + k + W, VB); a10 += u0 * v0; a11 += u1 * v1;
                memcpy(&u0, x2 + k, VB); memcpy(&u1, x2 + k + W, VB); a20 += u0 * v0; a21 += u1 * v1;
                memcpy(&u0, x3 + k, VB); memcpy(&u1, x3 + k + W, VB); a30 += u0 * v0; a31 += u1 * v1;
            }
            a00 += a01; a10 += a11; a20 += a21; a30 += a31;
            T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (int j = 0; j < W; j++) { s0 += a00[j]; s1 += a10[j]; s2 += a20[j]; s3 += a30[j]; }
            for (; k < K; k++) { s0 += x0[k] * y[k]; s1 += x1[k] * y[k]; s2 += x2[k] * y[k]; s3 += x3[k] * y[k]; }
            out[i] = s0; out[i + 1] = s1; out[i + 2] = s2; out[i + 3] = s3;
        }
        for (; i < i1; i++) {
            const T *x = X + i * sxi;
            NAME_v a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
            long long k = 0;
            for (; k + 4 * W <= K; k += 4 * W) {
                NAME_v x0, x1, x2, x3, v0, v1, v2, v3;
                memcpy(&x0, x + k, VB); memcpy(&x1, x + k + W, VB); memcpy(&x2, x + k + 2 * W, VB);
                memcpy(&x3, x + k + 3 * W, VB); memcpy(&v0, y + k, VB); memcpy(&v1, y + k + W, VB);
                memcpy(&v2, y + k + 2 * W, VB); memcpy(&v3, y + k + 3 * W, VB);
                a0 += x0 * v0; a1 += x1 * v1; a2 += x2 * v2; a3 += x3 * v3;
            }
            a0 += a1 + a2 + a3;
            T acc = 0;
            for (int j = 0; j < W; j++) acc += a0[j];
            for (; k < K; k++) acc += x[k] * y[k];
            out[i] = acc;
        }
    } else {
        for (long long i = i0; i < i1; i++) {
            T acc = 0;
            for (long long k = 0; k < K; k++) acc += X[i * sxi + k * sxk] * y[k * sy];
            out[i] = acc;
        }
    }
}
/* M == 1 or N == 1 (M, N, K > 0): the output dimension split over the threads from par_macs multiply-adds on, the
   epilogue on each thread's part; returns the first nonzero epilogue code */
static __attribute__((unused)) int NAME_gemv_all(long long M, long long N, long long K, const T *A, long long sam, long long sak,
                                                 const T *B, long long sbn, long long sbk, T *C, lm_epilogue epi,
                                                 void **bufs, const long long *syms, double par_macs) {
    int rows = N == 1;
    long long len = rows ? M : N;
    const T *X = rows ? A : B, *y = rows ? B : A;
    long long sxi = rows ? sam : sbn, sxk = rows ? sak : sbk, sy = rows ? sbk : sak;
    int err = 0;
    #pragma omp parallel if(!omp_in_parallel() && (double)M * (double)N * (double)K >= par_macs)
    {
        long long nt = omp_get_num_threads(), t = omp_get_thread_num();
        long long per = ((len + nt - 1) / nt + 15) / 16 * 16;
        long long lo = t * per < len ? t * per : len, hi = lo + per < len ? lo + per : len;
        if (hi > lo) {
            NAME_gemv(lo, hi, K, X, sxi, sxk, y, sy, C);
            int e = !epi ? 0 : rows ? epi(bufs, syms, lo, hi, 0, 1) : epi(bufs, syms, 0, 1, lo, hi);
            if (e) {
                #pragma omp critical(lm_own_gemm_err)
                { if (!err) err = e; }
            }
        }
    }
    return err;
}
"""

_TEMPLATE = r"""
/* NAME: own GEMM, T, register tile MR x NR, kc=KC mc=MC nc=NC (luminal.codegen.gemm) */
typedef T NAME_v __attribute__((vector_size(VB)));
typedef T NAME_vu __attribute__((vector_size(VB), aligned(sizeof(T))));
/* c[i*ldc + j] (+)= sum_k a[k*MR + i] * b[k*NR + j] over one MR x NR tile; a, b packed (b VB-byte aligned:
   the panel is 64-byte aligned and a sliver is a multiple of VB bytes) */
static __attribute__((noinline)) void NAME_kernel(long long kb, const T *restrict a, const T *restrict b,
                                                   T *restrict c, long long ldc, int accumulate) {
    b = (const T *)__builtin_assume_aligned(b, VB);
DECLS
PREFETCH_C
    #pragma GCC unroll UNROLL
    for (long long k = 0; k < kb; k++) {
BODY
        a += MR; b += NR;
    }
    if (accumulate) {
STORE_ADD
    } else {
STORE
    }
}
/* the kernel on an edge tile: rows x cols of it (rows <= MR, cols <= NR) go to c */
static void NAME_edge(long long kb, const T *a, const T *b, T *restrict c, long long ldc, long long rows,
                      long long cols, int accumulate) {
    T tile[MR * NR] __attribute__((aligned(64)));
    NAME_kernel(kb, a, b, tile, NR, 0);
    for (long long i = 0; i < rows; i++) {
        T *restrict ci = c + i * ldc; const T *ti = tile + i * NR;
        if (accumulate) for (long long j = 0; j < cols; j++) ci[j] += ti[j];
        else for (long long j = 0; j < cols; j++) ci[j] = ti[j];
    }
}
/* pack rows [0, mb) x k [0, kb) of A (A(m,k) = A[m*sam + k*sak]) into MR-row slivers, zero-padded:
   ap[s*MR*kb + k*MR + i] */
static void NAME_pack_a(long long mb, long long kb, const T *A, long long sam, long long sak, T *restrict ap) {
    long long i0 = 0, full = mb / MR * MR;
    if (sam == 1) {  /* A stored K x M (transposed): read each of its rows once, across all the slivers */
        for (long long k = 0; k < kb; k++) {
            const T *src = A + k * sak;
            for (long long s = 0; s < full; s += MR)
                for (int i = 0; i < MR; i++) ap[s * kb + k * MR + i] = src[s + i];
        }
        i0 = full;
    } else if (sak == 1) {  /* row-major A: rows contiguous along k, transposed in register blocks */
        for (long long s = 0; s < full; s += MR) lm_og_packt_T(MR, kb, A + s * sam, sam, ap + s * kb, MR);
        i0 = full;
    }
    for (; i0 < mb; i0 += MR) {
        long long rows = mb - i0 < MR ? mb - i0 : MR;
        const T *src = A + i0 * sam;
        T *restrict dst = ap + i0 * kb;
        for (long long k = 0; k < kb; k++)
            for (int i = 0; i < MR; i++) dst[k * MR + i] = i < rows ? src[i * sam + k * sak] : (T)0;
    }
}
/* pack k [0, kb) x columns [0, nb) of B (B(k,n) = B[n*sbn + k*sbk]) into NR-column slivers, zero-padded:
   bp[s*NR*kb + k*NR + j] */
static void NAME_pack_b(long long nb, long long kb, const T *B, long long sbn, long long sbk, T *restrict bp) {
    long long j0 = 0;
    if (sbn == 1) {  /* row-major B: a few rows at a time, each read once along all the slivers */
        long long full = nb / NR * NR;
        for (long long k0 = 0; k0 < kb; k0 += 8) {
            long long k1 = k0 + 8 < kb ? k0 + 8 : kb;
            for (long long s = 0; s < full; s += NR)
                for (long long k = k0; k < k1; k++) memcpy(bp + s * kb + k * NR, B + k * sbk + s, NR * sizeof(T));
        }
        j0 = full;
    }
    for (; j0 < nb; j0 += NR) {
        long long cols = nb - j0 < NR ? nb - j0 : NR;
        const T *src = B + j0 * sbn;
        T *restrict dst = bp + j0 * kb;
        if (cols == NR && sbk == 1) {  /* B stored N x K: transposed in register blocks */
            lm_og_packt_T(NR, kb, src, sbn, dst, NR);
        } else {
            for (long long k = 0; k < kb; k++)
                for (int j = 0; j < NR; j++) dst[k * NR + j] = j < cols ? src[j * sbn + k * sbk] : (T)0;
        }
    }
}
/* plain loops over rows [m0, m1) x columns [n0, n1) and the epilogue over them (no packing memory) */
static int NAME_naive(long long m0, long long m1, long long n0, long long n1, long long N, long long K,
                      const T *A, long long sam, long long sak, const T *B, long long sbn, long long sbk, T *C,
                      lm_epilogue epi, void **bufs, const long long *syms) {
    for (long long m = m0; m < m1; m++)
        for (long long n = n0; n < n1; n++) {
            T acc = 0;
            for (long long k = 0; k < K; k++) acc += A[m * sam + k * sak] * B[n * sbn + k * sbk];
            C[m * N + n] = acc;
        }
    return epi && m1 > m0 && n1 > n0 ? epi(bufs, syms, m0, m1, n0, n1) : 0;
}
/* rows [m0, m1) x columns [n0, n1) of C by this thread in K blocks of kc, with the B panel bp and the A block
   ap; thread t of
   nt (nt > 1: the threads of one team share bp, each packs its part of every panel, between barriers, and
   computes its own rows). epi on each block of MC rows x about LM_OWN_GEMM_EPI_COLS columns of C right
   after its last K block. */
static int NAME_run(long long m0, long long m1, long long n0, long long n1, long long N, long long K, long long kc,
                    const T *A, long long sam, long long sak, const T *B, long long sbn, long long sbk, T *C,
                    lm_epilogue epi, void **bufs, const long long *syms, T *bp, T *ap, int t, int nt) {
    int err = 0;
    for (long long jc = n0; jc < n1; jc += NC) {
        long long nb = n1 - jc < NC ? n1 - jc : NC;
        for (long long pc = 0; pc < K; pc += kc) {
            long long kb = K - pc < kc ? K - pc : kc;
            int acc = pc > 0, last = pc + kb >= K;
            long long ns = (nb + NR - 1) / NR, s0 = ns * t / nt, s1 = ns * (t + 1) / nt;
            if (s1 > s0) {
                long long c0 = s0 * NR, c1 = s1 * NR < nb ? s1 * NR : nb;
                NAME_pack_b(c1 - c0, kb, B + (jc + c0) * sbn + pc * sbk, sbn, sbk, bp + c0 * kb);
            }
            if (nt > 1) {
                #pragma omp barrier
            }
            for (long long ic = m0; ic < m1; ic += MC) {
                long long mb = m1 - ic < MC ? m1 - ic : MC;
                NAME_pack_a(mb, kb, A + ic * sam + pc * sak, sam, sak, ap);
                long long e0 = 0;  /* the columns of this block the epilogue has not seen yet start here */
                for (long long jr = 0; jr < nb; jr += NR) {
                    long long cols = nb - jr < NR ? nb - jr : NR;
                    const T *bs = bp + jr * kb;
                    T *cj = C + ic * N + jc + jr;
                    for (long long ir = 0; ir < mb; ir += MR) {
                        long long rows = mb - ir < MR ? mb - ir : MR;
                        if (rows == MR && cols == NR) NAME_kernel(kb, ap + ir * kb, bs, cj + ir * N, N, acc);
                        else NAME_edge(kb, ap + ir * kb, bs, cj + ir * N, N, rows, cols, acc);
                    }
                    if (last && epi && (jr + cols >= nb || jr + cols - e0 >= LM_OWN_GEMM_EPI_COLS)) {
                        /* these mb x (up to LM_OWN_GEMM_EPI_COLS) of C are final and still in L1/L2 */
                        int e = epi(bufs, syms, ic, ic + mb, jc + e0, jc + jr + cols);
                        if (e && !err) err = e;
                        e0 = jr + cols;
                    }
                }
            }
            if (nt > 1) {
                #pragma omp barrier
            }
        }
    }
    return err;
}
""" + GEMV_ROWS + r"""static int NAME(long long M, long long N, long long K, const T *A, long long sam, long long sak,
                const T *B, long long sbn, long long sbk, T *C, lm_epilogue epi, void **bufs,
                const long long *syms) {
    if (M <= 0 || N <= 0) return 0;
    if (K <= 0) {
        #pragma omp parallel for schedule(static) if(M * N >= (1LL << 16) && !omp_in_parallel())
        for (long long m = 0; m < M; m++) memset(C + m * N, 0, (size_t)N * sizeof(T));
        return epi ? lm_epilogue_all(epi, bufs, syms, M, N) : 0;
    }
    if (M == 1 || N == 1) {  /* matrix-vector: the output dimension split over the threads */
        return NAME_gemv_all(M, N, K, A, sam, sak, B, sbn, sbk, C, epi, bufs, syms, (double)LM_OWN_GEMM_PAR_MACS);
    }
    long long kcap = (K + (K + KC - 1) / KC - 1) / ((K + KC - 1) / KC);  /* K blocks of equal size, at most KC */
    int nt = omp_in_parallel() || (double)M * (double)N * (double)K < (double)LM_OWN_GEMM_PAR_MACS
             ? 1 : omp_get_max_threads();
    int err = 0;
    if (nt > 1 && (double)M * (double)N * (double)K >= (double)LM_OWN_GEMM_SHARED_MACS
        && M >= LM_OWN_GEMM_SHARED_ROWS * nt && ((M + MR - 1) / MR >= 4 * nt || M >= N)) {
        /* a big GEMM: split the rows, the threads share one B panel (no operand is packed twice) */
        long long ncap = (N < NC ? N + NR - 1 : NC) / NR * NR;
        T *bp = (T *)lm_og_grow(&lm_og_bbuf, &lm_og_bcap, (size_t)(kcap * ncap) * sizeof(T));
        int fail = !bp;
        if (!fail) {
            #pragma omp parallel
            {
                int t = omp_get_thread_num(), n = omp_get_num_threads();
                long long per = ((M + n - 1) / n + MR - 1) / MR * MR;
                long long lo = t * per < M ? t * per : M, hi = lo + per < M ? lo + per : M;
                long long mcap = (hi - lo < MC ? hi - lo + MR - 1 : MC) / MR * MR;
                T *ap = (T *)lm_og_grow(&lm_og_abuf, &lm_og_acap, (size_t)(kcap * (mcap ? mcap : MR)) * sizeof(T));
                if (!ap) {
                    #pragma omp atomic write
                    fail = 1;
                }
                #pragma omp barrier
                int f;
                #pragma omp atomic read
                f = fail;
                if (!f) {
                    int e = NAME_run(lo, hi, 0, N, N, K, kcap, A, sam, sak, B, sbn, sbk, C, epi, bufs, syms, bp, ap,
                                     t, n);
                    if (e) {
                        #pragma omp critical(lm_own_gemm_err)
                        { if (!err) err = e; }
                    }
                }
            }
        }
        return fail ? NAME_naive(0, M, 0, N, N, K, A, sam, sak, B, sbn, sbk, C, epi, bufs, syms) : err;
    }
    if (nt > 1) {
        /* smaller (or few rows): split the longer side, each thread with its own panels (no barriers) */
        #pragma omp parallel
        {
            int t = omp_get_thread_num(), n = omp_get_num_threads(), by_rows = M > N;
            long long len = by_rows ? M : N, unit = by_rows ? MR : NR;
            long long per = ((len + n - 1) / n + unit - 1) / unit * unit;
            long long lo = t * per < len ? t * per : len, hi = lo + per < len ? lo + per : len;
            if (hi > lo) {
                long long m0 = by_rows ? lo : 0, m1 = by_rows ? hi : M, n0 = by_rows ? 0 : lo, n1 = by_rows ? N : hi;
                long long ncap = (n1 - n0 < NC ? n1 - n0 + NR - 1 : NC) / NR * NR;
                long long mcap = (m1 - m0 < MC ? m1 - m0 + MR - 1 : MC) / MR * MR;
                T *bp = (T *)lm_og_grow(&lm_og_bbuf, &lm_og_bcap, (size_t)(kcap * ncap) * sizeof(T));
                T *ap = (T *)lm_og_grow(&lm_og_abuf, &lm_og_acap, (size_t)(kcap * mcap) * sizeof(T));
                int e = bp && ap
                    ? NAME_run(m0, m1, n0, n1, N, K, kcap, A, sam, sak, B, sbn, sbk, C, epi, bufs, syms, bp, ap, 0, 1)
                    : NAME_naive(m0, m1, n0, n1, N, K, A, sam, sak, B, sbn, sbk, C, epi, bufs, syms);
                if (e) {
                    #pragma omp critical(lm_own_gemm_err)
                    { if (!err) err = e; }
                }
            }
        }
        return err;
    }
    long long ncap = (N < NC ? N + NR - 1 : NC) / NR * NR, mcap = (M < MC ? M + MR - 1 : MC) / MR * MR;
    T *bp = (T *)lm_og_grow(&lm_og_bbuf, &lm_og_bcap, (size_t)(kcap * ncap) * sizeof(T));
    T *ap = (T *)lm_og_grow(&lm_og_abuf, &lm_og_acap, (size_t)(kcap * mcap) * sizeof(T));
    if (!bp || !ap) return NAME_naive(0, M, 0, N, N, K, A, sam, sak, B, sbn, sbk, C, epi, bufs, syms);
    return NAME_run(0, M, 0, N, N, K, kcap, A, sam, sak, B, sbn, sbk, C, epi, bufs, syms, bp, ap, 0, 1);
}
"""


# software prefetch of the packed B sliver this many k steps ahead in the microkernel (0: none; the hardware
# prefetchers keep up on Zen 3)
_PREFETCH_B = 0


def _kernel_parts(ctype: str, mr: int, nr: int, w: int) -> dict[str, str]:
    nv = nr // w
    ind = "    "
    decls = [f"{ind}NAME_v " + ", ".join(f"c{i}_{j} = {{0}}" for j in range(nv)) + ";" for i in range(mr)]
    body = [f"{ind * 2}NAME_v " + ", ".join(f"b{j} = *(const NAME_v *)(b + {j * w})" for j in range(nv)) + ";"]
    if _PREFETCH_B:
        body.append(f"{ind * 2}__builtin_prefetch(b + {_PREFETCH_B * nr});")
    for i in range(mr):
        body.append(f"{ind * 2}{{ NAME_v a{i} = a[{i}] - (NAME_v){{0}}; "
                    + " ".join(f"c{i}_{j} += a{i} * b{j};" for j in range(nv)) + " }")
    prefetch = [f"{ind}__builtin_prefetch(c + {i} * ldc, 1); __builtin_prefetch(c + {i} * ldc + {nr - 1}, 1);"
                for i in range(mr)]
    store, store_add = [], []
    for i in range(mr):
        for j in range(nv):
            p = f"c + {i} * ldc + {j * w}"
            store.append(f"{ind * 2}*(NAME_vu *)({p}) = c{i}_{j};")
            store_add.append(f"{ind * 2}*(NAME_vu *)({p}) += c{i}_{j};")
    pack_rows = [f"const {ctype} *" + ", *".join(f"r{i} = src + {i} * sam" for i in range(mr)) + ";",
                 "for (long long k = 0; k < kb; k++) {"]
    pack_rows += [f"    dst[k * MR + {i}] = r{i}[k];" for i in range(mr)]
    pack_rows.append("}")
    return {
        "DECLS": "\n".join(decls), "BODY": "\n".join(body), "PREFETCH_C": "\n".join(prefetch),
        "STORE_ADD": "\n".join(store_add), "STORE": "\n".join(store),
        "PACK_A_ROWS": ("\n" + ind * 3).join(pack_rows),
    }


def own_gemm_source(dtype: str, cfg: GemmConfig, name: str) -> str:
    """C source of ``static int NAME(M, N, K, A, sam, sak, B, sbn, sbk, C, epi, bufs, syms)``: the own GEMM
    for ``dtype`` (``"float32"`` / ``"float64"``) blocked as ``cfg``, with the semantics of ``lm_gemm_f32`` /
    ``lm_gemm_f64``: ``C[m*N + n] = sum_k A[m*sam + k*sak] * B[n*sbn + k*sbk]`` for any strides (0 included);
    K == 0 zeroes C; M == 0 or N == 0 does nothing; ``epi`` (or NULL) is called exactly once per element of C
    after its final value is stored, and the first nonzero code it returns is returned (else 0).

    The text needs ``HELPERS`` and ``gemm_helpers()`` before it; it defines ``NAME`` and ``NAME_*`` helpers
    plus a guarded common header, so several GEMMs can share one translation unit.
    """
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise ValueError(f"not a C identifier: {name!r}")
    cfg.validate(dtype)
    ctype = _CTYPE[dtype]
    w = _width(dtype)
    parts = _kernel_parts(ctype, cfg.mr, cfg.nr, w)
    src = _TEMPLATE
    for key, text in parts.items():
        src = src.replace(key, text)
    subs = {"MR": str(cfg.mr), "NR": str(cfg.nr), "KC": str(cfg.kc), "MC": str(cfg.mc), "NC": str(cfg.nc),
            "VB": str(vector_bytes()), "UNROLL": "4", "T": ctype}
    src = re.sub(r"\b(MR|NR|KC|MC|NC|VB|UNROLL|T)\b", lambda m: subs[m.group(1)], src)
    src = src.replace("lm_og_packt_T", f"lm_og_packt_{ctype}")
    src = re.sub(r"\bNAME", name, src)
    return _COMMON + _PACKT[ctype] + src
