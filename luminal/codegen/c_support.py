"""C source the renderer puts in front of every generated translation unit: includes, float helpers
(Python-semantics modulo, branch-free vectorizable ``exp2``/``log2``) and the GEMM wrappers around OpenBLAS
with a plain-loop fallback."""

from __future__ import annotations

import re

HELPERS = r"""
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <float.h>
#include <limits.h>
#ifdef LUMINAL_BLAS
#include <cblas.h>
#endif
static inline float lm_fmodf(float a, float b) { float r = fmodf(a, b); return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r; }
static inline double lm_fmod(double a, double b) { double r = fmod(a, b); return (r != 0.0 && ((r < 0.0) != (b < 0.0))) ? r + b : r; }
static inline long long lm_imod(long long a, long long b, int *err) { if (b == 0) { *err = 2; return 0; } if (b == -1) return 0; long long r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline unsigned long long lm_umod(unsigned long long a, unsigned long long b, int *err) { if (b == 0) { *err = 2; return 0; } return a % b; }
#include <omp.h>
/* bfloat16: stored as its bit pattern (the top half of a float32), computed in float. lm_bf16r rounds a float to
   the nearest bfloat16 (ties to even; overflow gives inf; NaN becomes the quiet NaN of its sign, 0x7fc0/0xffc0,
   as ml_dtypes/Eigen) and returns it as a float; branch-free, so loops stay vectorizable. */
static inline uint32_t lm_bf16_round_bits(float x) {
    uint32_t u; memcpy(&u, &x, 4);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    uint32_t q = (u & 0x80000000u) | 0x7fc00000u;
    return (u & 0x7fffffffu) > 0x7f800000u ? q : r;
}
static inline float lm_bf16r(float x) { uint32_t u = lm_bf16_round_bits(x); float y; memcpy(&y, &u, 4); return y; }
static inline unsigned short lm_f32_to_bf16(float x) {
    uint32_t u; memcpy(&u, &x, 4);  /* a value that is a bfloat16 already keeps its bits (a NaN's payload too) */
    return (unsigned short)(((u & 0xffffu) == 0 ? u : lm_bf16_round_bits(x)) >> 16);
}
static inline float lm_bf16_to_f32(unsigned short b) { uint32_t u = (uint32_t)b << 16; float y; memcpy(&y, &u, 4); return y; }
/* BitCast: the bits of a float as an unsigned integer of its width and back (memcpy: no aliasing UB; GCC turns it
   into a register move and, without -ffast-math, never touches a NaN's payload). A bfloat16 value is computed as a
   float whose low 16 bits are zero: its bits are the top half. */
static inline uint16_t lm_bits_f16(_Float16 x) { uint16_t u; memcpy(&u, &x, 2); return u; }
static inline _Float16 lm_f16_of(uint16_t u) { _Float16 x; memcpy(&x, &u, 2); return x; }
static inline uint32_t lm_bits_f32(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static inline float lm_f32_of(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
static inline uint64_t lm_bits_f64(double x) { uint64_t u; memcpy(&u, &x, 8); return u; }
static inline double lm_f64_of(uint64_t u) { double x; memcpy(&x, &u, 8); return x; }
static inline uint16_t lm_bits_bf16(float x) { return (uint16_t)(lm_bits_f32(x) >> 16); }
static inline float lm_bf16_of(uint16_t u) { return lm_f32_of((uint32_t)u << 16); }
/* Branch-free float32 exp2/log2 the compiler can vectorize (libm calls block vectorization without
   -ffast-math, which we do not use). exp2: round-to-nearest range reduction, degree-7 Taylor on [-0.5, 0.5]
   (relative error ~1e-7); log2: mantissa in [sqrt(1/2), sqrt(2)), atanh series in t=(m-1)/(m+1).
   NaN, +-inf, 0, negatives and subnormal inputs and results follow IEEE/libm. */
static inline float lm_exp2f(float x) {
    /* (inputs whose result is set below -- 0 under -151, inf over 128, NaN -- are computed at 0: computed at
       -151, the last step's subnormal product took a microcode assist per vector, and a masked softmax (20 %
       of its scores -inf) ran 4x slower) */
    float xc = x < -151.0f ? 0.0f : x;
    xc = xc > 128.0f ? 0.0f : xc;
    xc = xc == xc ? xc : 0.0f;
    float r = rintf(xc), f = xc - r;
    float p = 1.0f + f * (0.69314718f + f * (0.24022651f + f * (0.05550411f + f * (0.00961813f
              + f * (0.00133336f + f * (0.00015404f + f * 0.0000152527f))))));
    /* p * 2^i in two exact power-of-two steps (each in the normal range): the last one rounds a subnormal
       result once, as libm does (bfloat16 results down to 2^-133 need them) */
    int i = (int)r, i1 = i >> 1, i2 = i - i1;
    uint32_t bits1 = (uint32_t)(i1 + 127) << 23, bits2 = (uint32_t)(i2 + 127) << 23;
    float s1, s2; memcpy(&s1, &bits1, 4); memcpy(&s2, &bits2, 4);
    float y = (p * s1) * s2;
    y = x > 128.0f ? INFINITY : y;
    y = x < -151.0f ? 0.0f : y;
    return x == x ? y : x;
}
/* Streaming stores, for outputs larger than the last-level cache (see CRenderer._streamed): a tile computed in
   L1 is copied out with non-temporal stores, which do not read the destination's lines first (a plain store
   does: 3 bytes of memory traffic per byte written instead of 2). lm_sfence() makes them visible before the
   parallel region's closing barrier. */
#if defined(__AVX__) || defined(__SSE2__)
#if defined(__GNUC__) && !defined(__clang__)
/* GCC's builtins behind _mm256_stream_si256 / _mm_stream_si128 / _mm_sfence: <immintrin.h> costs 0.5 s of
   parsing per translation unit with -march=native (a third of a small graph's compile time). */
typedef long long lm_v4di __attribute__((vector_size(32), aligned(32)));
typedef long long lm_v2di __attribute__((vector_size(16), aligned(16)));
#define LM_STREAM32(d, s) do { lm_v4di v_; memcpy(&v_, (s), 32); __builtin_ia32_movntdq256((lm_v4di *)(d), v_); } while (0)
#define LM_STREAM16(d, s) do { lm_v2di v_; memcpy(&v_, (s), 16); __builtin_ia32_movntdq((lm_v2di *)(d), v_); } while (0)
#define LM_SFENCE() __builtin_ia32_sfence()
#else
#include <immintrin.h>
#define LM_STREAM32(d, s) _mm256_stream_si256((__m256i *)(d), _mm256_loadu_si256((const __m256i *)(s)))
#define LM_STREAM16(d, s) _mm_stream_si128((__m128i *)(d), _mm_loadu_si128((const __m128i *)(s)))
#define LM_SFENCE() _mm_sfence()
#endif
#endif
static inline void lm_stream(void *restrict dst, const void *restrict src, long long bytes) {
    char *d = (char *)dst; const char *s = (const char *)src;
#if defined(__AVX__) || defined(__SSE2__)
#if defined(__AVX__)
    enum { W = 32 };
#else
    enum { W = 16 };
#endif
    long long head = (long long)((W - ((uintptr_t)d & (W - 1))) & (W - 1));
    if (head > bytes) head = bytes;
    memcpy(d, s, (size_t)head); d += head; s += head; bytes -= head;
    for (; bytes >= W; bytes -= W, d += W, s += W)
#if defined(__AVX__)
        LM_STREAM32(d, s);
#else
        LM_STREAM16(d, s);
#endif
#endif
    memcpy(d, s, (size_t)bytes);
}
static inline void lm_sfence(void) {
#if defined(__AVX__) || defined(__SSE2__)
    LM_SFENCE();
#endif
}
/* Row-local scratch (see CRenderer._render_rows): a row group's intermediate that only the group reads, row by
   row, lives in a per-thread buffer of one row instead of its arena buffer, so the row stays in L1/L2 between
   the group's passes and never goes to memory (softmax's exponentials: one write of the probabilities instead
   of two). Each thread keeps LM_ROW_SLOTS buffers, grown on demand; rows under LM_ROW_MIN bytes, or a failed
   allocation, use the arena buffer (``fallback``, the row's own place there). Without a fallback (NULL: the
   fused attention's blocks, which have no arena buffer) any size is taken and a failed allocation returns NULL.
   Per-thread scratch is weak and hidden: the translation units of one library share it, each library has its
   own, and luminal_release() frees it (with_release in luminal/codegen/c_support.py). */
#define LM_ROW_SLOTS 8
#define LM_ROW_MIN 1024
__attribute__((weak, visibility("hidden"))) __thread void *lm_row_p[LM_ROW_SLOTS];
__attribute__((weak, visibility("hidden"))) __thread long long lm_row_n[LM_ROW_SLOTS];
__attribute__((weak, visibility("hidden"))) void lm_release_rows(void) {
    for (int k = 0; k < LM_ROW_SLOTS; k++) { free(lm_row_p[k]); lm_row_p[k] = NULL; lm_row_n[k] = 0; }
}
static inline void *lm_row_scratch(int k, long long bytes, void *fallback) {
    if (fallback && (bytes < LM_ROW_MIN || k >= LM_ROW_SLOTS)) return fallback;
    if (bytes < 1) bytes = 1;  /* (an empty block still gets a pointer) */
    if (lm_row_n[k] < bytes) {
        long long cap = (bytes + 63) & ~63LL;
        free(lm_row_p[k]);
        lm_row_p[k] = aligned_alloc(64, (size_t)cap);
        lm_row_n[k] = lm_row_p[k] ? cap : 0;
        if (!lm_row_p[k]) return fallback;
    }
    return lm_row_p[k];
}
static inline float lm_log2f(float x) {
    int sub = x < 1.17549435e-38f;
    float xs = sub ? x * 8388608.0f : x;
    uint32_t bits; memcpy(&bits, &xs, 4);
    int e = (int)((bits >> 23) & 0xff) - 127 - (sub ? 23 : 0);
    uint32_t mb = (bits & 0x7fffffu) | 0x3f800000u;
    float m; memcpy(&m, &mb, 4);
    int big = m > 1.41421356f;
    m = big ? m * 0.5f : m;
    e += big;
    float t = (m - 1.0f) / (m + 1.0f), t2 = t * t;
    float y = (float)e + t * (2.88539008f + t2 * (0.96179669f + t2 * (0.57707802f + t2 * (0.41219858f
              + t2 * 0.32059890f))));
    y = x == 0.0f ? -INFINITY : y;
    y = x < 0.0f ? NAN : y;
    y = x == INFINITY ? INFINITY : y;
    return x == x ? y : x;
}
"""

_GEMM_HELPER = r"""
/* C[M,N] = A[M,K] . B[K,N] with A(m,k) = A[m*sam + k*sak], B(k,n) = B[n*sbn + k*sbk]; C row-major (ldc = N).
   epi (or NULL): the generated elementwise kernel that reads C, run over each block of C as soon as it is done
   (epi(bufs, syms, m0, m1, n0, n1)); returns the first nonzero error code of the epilogue.
   BLAS calls are single-threaded (lm_blas_init): a GEMM of at least LM_SPLIT_MACS multiply-adds is split over
   the OpenMP threads -- N in column blocks, or M in row blocks when M > N -- one BLAS call per thread. OpenBLAS's
   own threads would share the cores with the OpenMP pool: on 2 cores, alternating threaded GEMMs and OpenMP
   kernels made the GEMMs up to 3x slower than alone and the next OpenMP region 4x slower (waking a sleeping
   worker); split over the one pool, a 128x1024x256 GEMM takes 380-420 us instead of 430-1200, and the next
   region 13 us instead of 50-90. Inside a parallel region (batched GEMMs) a call stays whole. Layouts BLAS
   cannot address fall back to loops. */
static int lm_gemm_T(long long M, long long N, long long K, const T *A, long long sam, long long sak,
                     const T *B, long long sbn, long long sbk, T *C, lm_epilogue epi, void **bufs,
                     const long long *syms) {
    int ta = -1, tb = -1; long long lda = 0, ldb = 0;
#ifdef LUMINAL_BLAS
    if (sak == 1 || K == 1) { ta = 0; lda = M == 1 ? K : sam; } else if (sam == 1 || M == 1) { ta = 1; lda = K == 1 ? M : sak; }
    if ((ta == 0 && lda < K) || (ta == 1 && lda < M)) ta = -1;
    if (sbn == 1 || N == 1) { tb = 0; ldb = K == 1 ? N : sbk; } else if (sbk == 1 || K == 1) { tb = 1; ldb = N == 1 ? K : sbn; }
    if ((tb == 0 && ldb < N) || (tb == 1 && ldb < K)) tb = -1;
    if (M >= INT_MAX || N >= INT_MAX || K >= INT_MAX || lda >= INT_MAX || ldb >= INT_MAX) ta = -1;
#endif
    if (M == 0 || N == 0) return 0;
    if (K == 0 || ta < 0 || tb < 0) {
        #pragma omp parallel for schedule(static) if(M * N * K >= 32768 && !omp_in_parallel())
        for (long long m = 0; m < M; m++)
            for (long long n = 0; n < N; n++) {
                ACC acc = 0;
                for (long long k = 0; k < K; k++) acc += (ACC)A[m * sam + k * sak] * (ACC)B[n * sbn + k * sbk];
                C[m * N + n] = (T)acc;
            }
        return epi ? lm_epilogue_all(epi, bufs, syms, M, N) : 0;
    }
#ifdef LUMINAL_BLAS
    /* (never OpenBLAS's own threads: right after a kernel the OpenMP threads still spin-wait on the same cores,
       and a threaded sgemm then ran 1.6x slower -- a BERT FFN's 2048 x 384 x 1536 19.6 ms against 11.9 split;
       alone, a 2048^3 GEMM is within 1% either way) */
    int err = 0;
    #pragma omp parallel if(M * N * K >= LM_SPLIT_MACS && !omp_in_parallel())
    {
        long long nt = omp_get_num_threads(), t = omp_get_thread_num(), lo = 0, hi;
        int by_rows = M > N;
        long long len = by_rows ? M : N;
        long long per = ((len + nt - 1) / nt + 15) / 16 * 16;  /* 64-byte aligned column blocks */
        lo = t * per < len ? t * per : len;
        hi = lo + per < len ? lo + per : len;
        if (hi > lo) {
            if (by_rows)
                BLAS_GEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)(hi - lo),
                     (int)N, (int)K, 1, A + lo * sam, (int)lda, B, (int)ldb, 0, C + lo * N, (int)N);
            else
                BLAS_GEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M,
                     (int)(hi - lo), (int)K, 1, A, (int)lda, B + lo * sbn, (int)ldb, 0, C + lo, (int)N);
            /* the epilogue over this thread's block of C, still in cache */
            int e = !epi ? 0 : by_rows ? epi(bufs, syms, lo, hi, 0, N) : epi(bufs, syms, 0, M, lo, hi);
            if (e) {
                #pragma omp atomic write
                err = e;
            }
        }
    }
    return err;
#endif
    return 0;
}
"""


_BLAS_INIT = r"""
/* One thread pool: OpenBLAS runs single-threaded inside the OpenMP threads (see lm_gemm_f32). */
#define LM_SPLIT_MACS 65536LL
#ifdef LUMINAL_BLAS
void scipy_openblas_set_num_threads(int);
static void lm_blas_init(void) { static int done = 0; if (!done) { scipy_openblas_set_num_threads(1); done = 1; } }
#else
static void lm_blas_init(void) {}
#endif
/* A GEMM's epilogue: the generated elementwise kernel over rows [m0, m1) and columns [n0, n1) of the product */
typedef int (*lm_epilogue)(void **bufs, const long long *syms, long long m0, long long m1, long long n0, long long n1);
#define LM_EPILOGUE_PARALLEL (1LL << 18)
/* an epilogue over all of C (a GEMM that was not split over the threads): rows split over the threads */
static int lm_epilogue_all(lm_epilogue epi, void **bufs, const long long *syms, long long M, long long N) {
    int err = 0;
    #pragma omp parallel if(M * N >= LM_EPILOGUE_PARALLEL && !omp_in_parallel())
    {
        long long nt = omp_get_num_threads(), t = omp_get_thread_num();
        long long lo = M * t / nt, hi = M * (t + 1) / nt;
        int e = hi > lo ? epi(bufs, syms, lo, hi, 0, N) : 0;
        if (e) {
            #pragma omp atomic write
            err = e;
        }
    }
    return err;
}
"""


# (a release of per-thread scratch: weak and hidden, no arguments; an AMX tile release is static inline)
_RELEASE_DEF = re.compile(r'__attribute__\(\(weak, visibility\("hidden"\)\)\) void (\w+)\(void\)\s*\{')


def with_release(source: str) -> str:
    """``source`` (a library's whole C) followed by its exported ``luminal_release()``: every thread of an OpenMP
    team frees its own per-thread scratch (each ``lm_release_*`` / ``*_release`` the source defines; the kernels
    grow it again on demand). Called from Python (:func:`luminal.runtime.build.release_scratch`) on libraries
    that will not run for a while, such as a search's candidates: without it each loaded library kept its scratch
    for the process's life (a searched W4: 17 libraries, 214 MB)."""
    names = list(dict.fromkeys(_RELEASE_DEF.findall(source)))
    calls = " ".join(f"{n}();" for n in names)
    return (f"{source}\n/* frees this library's per-thread scratch (luminal.codegen.c_support.with_release) */\n"
            f"void luminal_release(void) {{\n#pragma omp parallel\n    {{ {calls} }}\n}}\n")


def gemm_helpers() -> str:
    f32 = _GEMM_HELPER.replace("lm_gemm_T", "lm_gemm_f32").replace("ACC", "float").replace("const T", "const float") \
        .replace("T *C", "float *C").replace("(T)acc", "(float)acc").replace("BLAS_GEMM", "scipy_cblas_sgemm")
    f64 = _GEMM_HELPER.replace("lm_gemm_T", "lm_gemm_f64").replace("ACC", "double").replace("const T", "const double") \
        .replace("T *C", "double *C").replace("(T)acc", "(double)acc").replace("BLAS_GEMM", "scipy_cblas_dgemm")
    return _BLAS_INIT + f32 + f64
