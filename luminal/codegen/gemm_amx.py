"""AMX tile GEMMs for bfloat16 weights and autocast products (Intel Sapphire Rapids and later: ``__AMX_BF16__``).

``C = A . B^T`` with ``B`` ``N x K`` stored as bfloat16 (or float32 read rounded to bfloat16: autocast) and
``A`` ``M x K`` stored as bfloat16, float32 or float32 read rounded, any strides. The tile product
``TDPBF16PS`` multiplies bfloat16 pairs exactly and adds them into float32 sums, like the float32 GEMM over the
converted operands (PyTorch's CPU bfloat16 semantics: oneDNN uses the same instruction). A float32 ``A`` is
split into three bfloat16 parts ``a1 + a2 + a3`` (each the top 16 bits of what is left of ``a``: 24
significant bits, float32's; the parts are truncations, so they sum to ``a`` exactly) and the three
products are summed, so a weight-only bfloat16 model keeps float32
activations at float32 accuracy (the error of a float32 GEMM: a few ulp of ``sum |a||b|``).

Two formulations, chosen per call:

* **Few rows** (``M`` < ``LM_AMX_ROWS_M``, a bfloat16 ``B`` and ``A`` both contiguous along K: inference with
  stored weights). The weight is the tiles' first operand, read where it is stored (16 rows of 32 elements per
  tile, no packing); ``A`` is packed once per call into the pair-interleaved layout of the second operand (16
  tile rows of 16 words ``(A[m][2p], A[m][2p + 1])``). Each thread takes a share of the weight's rows, so a
  weight is streamed once per call; results are written transposed from the tiles into ``C``.
* **Rows** (everything else: many rows, a ``B`` to convert, operands not contiguous along K such as the
  gradient products of training, or a small ``C`` over a long K). ``A``'s rows are the first operand, copied
  once into a bfloat16 copy in tile order (each 16 x 32 tile one contiguous 1 KB block); ``B`` is packed
  pair-interleaved, read along whichever of its strides is 1 and rounded with AVX-512 integer operations
  (bit-identical to ``lm_f32_to_bf16``): rows through a 16 x 16 transpose of pairs in registers, columns by
  interleaving two rows of K; a transposed ``A`` goes through 32 x 32 register transposes. Each result tile is
  stored straight into ``C``. The work is split over the threads one of three ways:

  - *columns*, when ``A``'s copy is small (``LM_AMX_COLS_BYTES``; a convolution's forward and data-gradient
    products under autocast, ``M`` 64-288 against ``N`` 36864): each thread packs a chunk of ``B``'s columns
    (``LM_AMX_COLS_CHUNK`` bytes) into its own buffer and runs every row of ``C`` over it while it is in the
    cache;
  - *K chunks*, when ``C`` is small (``LM_AMX_KSUM_MN`` elements) and K long (a weight gradient: 64 x 288 over
    K = 36864): fixed chunks of ``LM_AMX_KSUM_KB`` K blocks (more when the partials would pass
    ``LM_AMX_KSUM_BYTES``, 64 MB), each thread packing its chunk of ``B`` and storing
    a partial ``C``; the partials are summed in chunk order, so the bits do not depend on the thread count;
  - *rows* otherwise: ``B`` packed whole first, the threads split ``A``'s 32-row blocks and the epilogue runs
    on each block while it is in the cache.

The kernel needs the operating system's permission for the tile data (``arch_prctl(ARCH_REQ_XCOMP_PERM)``,
asked once per process); without it, or with ``LUMINAL_AMX=0`` in the environment, :func:`amx_source`'s
function returns ``LM_AMX_UNUSABLE`` and the caller takes its other path.

**Without AMX, with AVX512-BF16** (Zen 4 / Zen 5, Cooper Lake: ``LM_AMX_DP``) the *rows* formulation runs with
its tile products as ``vdpbf16ps`` dot products (:mod:`luminal.codegen.gemm_amx_rows`), for bfloat16-valued A
(stored or rounded; a float32 A would take three products), except a row or two and a bfloat16 B read where it
is stored by at most ``LM_AUTO_SMALL_M`` rows (the dot-product kernel streams it unpacked);
``LUMINAL_AMX=0`` turns it off too. Measured on a 2-core AMD EPYC (AVX512-BF16, no AMX), autocast products
before (float32 conversion + OpenBLAS) and after: 1024^3 193-196 -> 277-355 GFLOP/s; autocast training steps
W3 6.30 -> 5.41, W4 41.2 -> 28.9, W5 35.1 -> 22.5 ms (docs/mixed_precision.md).
"""

from __future__ import annotations

from .gemm_amx_rows import _KERNEL_ROWS

_COMMON = r"""
#ifndef LM_AMX_COMMON
#define LM_AMX_COMMON
#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__x86_64__) && \
    defined(__linux__)
#define LM_HAVE_AMX 1
#elif defined(__AVX512BF16__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__x86_64__) && \
    defined(__linux__)
/* no AMX, but AVX512-BF16 (Zen 4 / Zen 5, Cooper Lake): the same packing and blocking, each 16 x 16 tile product
   computed with vdpbf16ps (the same pairs of exact products into float32 sums, twice the multiply-adds of a
   float32 FMA per instruction); the few-rows formulation is the AMX one only */
#define LM_HAVE_AMX 1
#define LM_AMX_DP 1
#ifndef LM_AMX_DP_ROWS
#define LM_AMX_DP_ROWS 2  /* up to this many rows, the caller's kernels (matrix-vector, dot products) */
#endif
#endif
#ifdef LM_HAVE_AMX
#define LM_AMX_UNUSABLE (-1000)
/* gcc 12's tile loads and stores are asm statements without a memory clobber: the optimizer may move or drop
   stores into a buffer that a tile then loads, and reads of a buffer a tile stored; a compiler barrier between */
#define LM_AMX_BARRIER __asm__ __volatile__("" ::: "memory")
/* pairs of bfloat16s read and written as one word (may_alias: the same memory is written as unsigned short) */
typedef uint32_t __attribute__((may_alias)) lm_amx_u32;
#ifndef LM_AMX_AHEAD
#define LM_AMX_AHEAD 256  /* elements ahead along K that the weight rows are prefetched */
#endif
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
static int lm_amx_state;  /* 0: not asked yet, 1: usable, -1: not */
static int lm_amx_ok(void) {
    int s = __atomic_load_n(&lm_amx_state, __ATOMIC_ACQUIRE);
    if (s == 0) {
        const char *env = getenv("LUMINAL_AMX");
#ifdef LM_AMX_DP
        s = (env && env[0] == '0') ? -1 : 1;
#else
        /* ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18) */
        s = (env && env[0] == '0') ? -1 : (syscall(SYS_arch_prctl, 0x1023, 18) == 0 ? 1 : -1);
#endif
        __atomic_store_n(&lm_amx_state, s, __ATOMIC_RELEASE);
    }
    return s == 1;
}
#ifdef LM_AMX_DP
static inline void lm_amx_config(void) {}
static inline void lm_amx_release(void) {}
#else
typedef struct {
    unsigned char palette, start_row, reserved[14];
    unsigned short colsb[16];
    unsigned char rows[16];
} lm_amx_cfg;
/* eight tiles of 16 rows x 64 bytes */
static void lm_amx_config(void) {
    lm_amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) { c.rows[i] = 16; c.colsb[i] = 64; }
    _tile_loadconfig(&c);
}
static inline void lm_amx_release(void) { _tile_release(); }
#endif
/* a float32 as the sum of three bfloat16s, each the top 16 bits of what is left (truncation: exact, never
   overflows): a = p1 + p2 + p3 for normal numbers; NaN gives (NaN, 0, 0), +-inf (inf, 0, 0). Branch-free. */
static inline void lm_amx_split(float a, unsigned short *p1, unsigned short *p2, unsigned short *p3) {
    uint32_t u, v, w;
    memcpy(&u, &a, 4);
    int finite = (u & 0x7f800000u) != 0x7f800000u, nan = (u & 0x7fffffffu) > 0x7f800000u;
    uint32_t h1 = nan ? (u & 0x80000000u) | 0x7fc00000u : u & 0xffff0000u;
    float f1, f2;
    memcpy(&f1, &h1, 4);
    float r = finite ? a - f1 : 0.0f;
    memcpy(&v, &r, 4);
    uint32_t h2 = v & 0xffff0000u;
    memcpy(&f2, &h2, 4);
    float r2 = r - f2;
    memcpy(&w, &r2, 4);
    *p1 = (unsigned short)(h1 >> 16); *p2 = (unsigned short)(h2 >> 16); *p3 = (unsigned short)(w >> 16);
}
/* transposes in registers, row r in v[r]: butterfly stages that swap the off-diagonal b x b blocks of every 2b x 2b
   block (b = half the size, ..., 1) with two-source permutes; lm_amx_tr16 a 32 x 32 matrix of 16-bit elements,
   lm_amx_tr32 a 16 x 16 matrix of 32-bit elements (bfloat16 pairs). The index tables: (generated) for stage s,
   row [2s] the upper row's new elements, [2s + 1] the lower row's. */
/* 16 float32s rounded to bfloat16 by lm_f32_to_bf16's rule (ties to even, a value that is a bfloat16 already keeps
   its bits, other NaNs become the quiet NaN of their sign), each in the top half of its 32-bit lane */
static inline __m512i lm_amx_r16(const float *p) {
    __m512i u = _mm512_loadu_si512((const void *)p);
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)),
                                 _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)));
    r = _mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_and_si512(u, _mm512_set1_epi32((int)0x80000000u)),
                                                      _mm512_set1_epi32(0x7fc00000)));
    return _mm512_mask_mov_epi32(r, _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0xffff)), u);
}
/* 16 stored bfloat16s, each in the top half of its 32-bit lane */
static inline __m512i lm_amx_b16(const unsigned short *p) {
    return _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16);
}
/* the top halves of a's and then b's 16 lanes: 32 bfloat16s in order */
static const unsigned short lm_amx_tops[32] __attribute__((aligned(64))) = {
    1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31, 33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
static inline __m512i lm_amx_tops2(__m512i a, __m512i b) {
    return _mm512_permutex2var_epi16(a, _mm512_load_si512((const void *)lm_amx_tops), b);
}
TRANSPOSES/* element i of A's bfloat16 copy (PARTS parts of `part` elements) from a stored element v */
static inline void lm_amx_store_b(unsigned short v, unsigned short *ac, long long i, size_t part) { (void)part; ac[i] = v; }
static inline void lm_amx_store_r(float v, unsigned short *ac, long long i, size_t part) { (void)part; ac[i] = lm_f32_to_bf16(v); }
static inline void lm_amx_store_f(float v, unsigned short *ac, long long i, size_t part) {
    lm_amx_split(v, ac + i, ac + part + i, ac + 2 * part + i);
}
#endif
#endif
"""


def _transpose(bits: int) -> str:
    """C of ``lm_amx_tr<bits>`` and its index table (see the comment above it in ``_COMMON``): an n x n matrix of
    ``bits``-bit elements in n registers, ``n = 512 / bits``; stage s swaps the off-diagonal b x b blocks
    (b = n/2, ..., 1) with ``_mm512_permutex2var_epi<bits>``."""
    n, ctype = 512 // bits, {16: "unsigned short", 32: "unsigned int"}[bits]
    rows, blocks, b = [], [], n // 2
    while b >= 1:
        blocks.append(b)
        rows.append([(n + c - b) if c & b else c for c in range(n)])  # the upper row's new elements
        rows.append([(n + c) if c & b else c + b for c in range(n)])  # the lower row's
        b //= 2
    table = ",\n    ".join("{" + ",".join(map(str, r)) + "}" for r in rows)
    return (f"static const {ctype} lm_amx_ix{bits}[{len(rows)}][{n}] __attribute__((aligned(64))) = {{\n    {table}}};\n"
            f"static inline void lm_amx_tr{bits}(__m512i *v) {{\n"
            f"    for (int s = 0, b = {n // 2}; s < {len(blocks)}; s++, b >>= 1) {{\n"
            f"        __m512i il = _mm512_load_si512((const void *)lm_amx_ix{bits}[2 * s]), "
            f"ih = _mm512_load_si512((const void *)lm_amx_ix{bits}[2 * s + 1]);\n"
            f"        for (int r = 0; r < {n}; r++)\n"
            "            if (!(r & b)) {\n"
            "                __m512i x = v[r], y = v[r + b];\n"
            f"                v[r] = _mm512_permutex2var_epi{bits}(x, il, y);\n"
            f"                v[r + b] = _mm512_permutex2var_epi{bits}(x, ih, y);\n"
            "            }\n    }\n}\n")


_COMMON = _COMMON.replace("TRANSPOSES", _transpose(16) + _transpose(32))

_KERNEL = r"""
#ifdef LM_HAVE_AMX
/* NAME: C (M x N, row-major) = A . B^T with B (N x K) stored as TB and A (M x K) stored as TA, element (m, k) of
   A at A[m*sam + k*sak], of B at B[n*sbn + k*sbk]: AMX tiles (luminal.codegen.gemm_amx). Few rows of A times a
   bfloat16 B contiguous along K run here, everything else in NAME_rows. Returns
   LM_AMX_UNUSABLE without touching C when AMX is not usable (the caller takes another path), else the epilogue's
   first nonzero code or 0. */
static int NAME(long long M, long long N, long long K, const TA *A, long long sam, long long sak,
                const TB *B_in, long long sbn, long long sbk, float *C, lm_epilogue epi, void **bufs,
                const long long *syms) {
    if (!lm_amx_ok()) return LM_AMX_UNUSABLE;
#ifdef LM_AMX_DP
    /* AVX512-BF16 without AMX: a float32 A would take three products (slower than float32); the caller's
       kernels take a row or two, and a bfloat16 B read where it is stored by up to LM_AUTO_SMALL_M rows (its
       dot-product kernel streams B once, unpacked: 4 x 4096 x 1024 in 0.27 ms against 0.67 packed) */
    if (PARTS > 1 || M <= LM_AMX_DP_ROWS || (!BCOPY && M <= LM_AUTO_SMALL_M && sak == 1 && sbk == 1))
        return LM_AMX_UNUSABLE;
    return NAME_rows(M, N, K, A, sam, sak, B_in, sbn, sbk, C, epi, bufs, syms);
#else
    /* operands that must be copied anyway (B converted, either not contiguous along K) are packed by NAME_rows */
    if (M >= LM_AMX_ROWS_M || sbk != 1 || sak != 1 || BCOPY ||
        ((double)M * (double)N <= (double)LM_AMX_KSUM_MN && (K + 31) / 32 >= 2 * LM_AMX_KSUM_KB))  /* (its K split) */
        return NAME_rows(M, N, K, A, sam, sak, B_in, sbn, sbk, C, epi, bufs, syms);
    const unsigned short *B = (const unsigned short *)B_in;
    long long mblocks = ((M + 15) / 16 + 1) / 2 * 2, kblocks = (K + 31) / 32, nblocks = (N + 15) / 16;
    size_t part = (size_t)(mblocks * kblocks) * 512;  /* bfloat16 elements per packed part */
    long long kpad = kblocks * 32;
    unsigned short *ap = (unsigned short *)lm_og_grow(&lm_lp_buf[0], &lm_lp_cap[0], PARTS * part * 2);
    if (!ap) return LM_AMX_UNUSABLE;
    int failed = 0;
    /* 16 rows at a time over the threads, each with its own row buffer t (rows past M are zero) */
    #pragma omp parallel for schedule(static) if(!omp_in_parallel() && (double)M * (double)K >= (double)LM_OWN_GEMM_PAR_MACS)
    for (long long mb = 0; mb < mblocks; mb++) {
        unsigned short *t = (unsigned short *)lm_og_grow(&lm_lp_buf[1], &lm_lp_cap[1], PARTS * (size_t)kpad * 2);
        if (!t) {
            __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
            continue;
        }
        for (long long m = mb * 16; m < mb * 16 + 16; m++) {  /* row m as PARTS bfloat16 rows, then its pairs */
            if (m < M) {
                const TA *src = A + m * sam;
SPLIT
                for (int q = 0; q < PARTS; q++) memset(t + q * kpad + K, 0, (size_t)(kpad - K) * 2);
            } else {
                memset(t, 0, PARTS * (size_t)kpad * 2);
            }
            for (int q = 0; q < PARTS; q++) {
                const lm_amx_u32 *tw = (const lm_amx_u32 *)(t + q * kpad);
                lm_amx_u32 *dst = (lm_amx_u32 *)(ap + q * part) + (m >> 4) * kblocks * 256 + (m & 15);
                for (long long pp = 0; pp < kpad / 2; pp++) dst[(pp >> 4) * 256 + (pp & 15) * 16] = tw[pp];
            }
        }
    }
    if (failed) return LM_AMX_UNUSABLE;
    int err = 0;
    #pragma omp parallel if(!omp_in_parallel() && (double)M * (double)N * (double)K >= (double)LM_OWN_GEMM_PAR_MACS)
    {
        long long nt = omp_get_num_threads(), t = omp_get_thread_num();
        long long pairs = (nblocks + 1) / 2, lo = pairs * t / nt * 2, hi = pairs * (t + 1) / nt * 2;
        if (hi > nblocks) hi = nblocks;
        if (hi > lo) {
            unsigned short edge[2][16 * 32] __attribute__((aligned(64)));
            float out[4][16 * 16] __attribute__((aligned(64)));
            lm_amx_config();
            /* (m outer: the packed rows stay in L1/L2 while this thread's share of the weight passes) */
            for (long long mb = 0; mb < mblocks; mb += 2) {
                for (long long nb = lo; nb < hi; nb += 2) {
                    int two = nb + 1 < hi;
                    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
                    for (long long kb = 0; kb < kblocks; kb++) {
                        for (int h = 0; h <= two; h++) {  /* weight rows (nb + h) * 16 ..., K block kb */
                            long long n0 = (nb + h) * 16, k0 = kb * 32;
                            const unsigned short *w = B + n0 * sbn + k0;
                            long long stride = sbn * 2;
                            if (n0 + 16 > N || k0 + 32 > K) {  /* an edge: a zero-padded copy */
                                long long rows = N - n0 < 16 ? N - n0 : 16, cols = K - k0 < 32 ? K - k0 : 32;
                                memset(edge[h], 0, sizeof edge[h]);
                                for (long long r = 0; r < rows; r++) memcpy(edge[h] + r * 32, w + r * sbn, cols * 2);
                                w = edge[h];
                                stride = 64;
                                LM_AMX_BARRIER;
                            }
                            if (h == 0) _tile_loadd(4, w, stride); else _tile_loadd(5, w, stride);
                            if (stride != 64 && k0 + LM_AMX_AHEAD < K)  /* 32 row streams: ask for them ahead */
                                for (int r = 0; r < 16; r++) _mm_prefetch((const char *)(w + r * sbn + LM_AMX_AHEAD), _MM_HINT_T0);
                        }
                        for (int p = 0; p < PARTS; p++) {
                            const unsigned short *x = ap + p * part + ((mb * kblocks + kb) * 16) * 32;
                            _tile_loadd(6, x, 64);
                            _tile_loadd(7, x + kblocks * 512, 64);
                            _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7);
                            if (two) { _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7); }
                        }
                    }
                    _tile_stored(0, out[0], 64); _tile_stored(1, out[1], 64);
                    if (two) { _tile_stored(2, out[2], 64); _tile_stored(3, out[3], 64); }
                    LM_AMX_BARRIER;
                    for (int q = 0; q < (two ? 4 : 2); q++) {  /* tile q: rows n of block nb + q/2, columns m */
                        long long n0 = (nb + q / 2) * 16, m0 = (mb + q % 2) * 16;
                        long long nn = N - n0 < 16 ? N - n0 : 16, mm = M - m0 < 16 ? M - m0 : 16;
                        if (mm <= 0) continue;
                        __m512i v[16];  /* transposed in registers, then a row of C per vector store */
                        for (int r = 0; r < 16; r++) v[r] = _mm512_load_si512((const void *)(out[q] + r * 16));
                        lm_amx_tr32(v);
                        __mmask16 keep = (__mmask16)((1u << nn) - 1u);
                        for (long long j = 0; j < mm; j++) _mm512_mask_storeu_epi32(C + (m0 + j) * N + n0, keep, v[j]);
                    }
                }
            }
            lm_amx_release();
            long long c0 = lo * 16, c1 = hi * 16 < N ? hi * 16 : N;
            int e = epi ? epi(bufs, syms, 0, M, c0, c1) : 0;
            if (e) {
                #pragma omp critical(lm_own_gemm_err)
                { if (!err) err = e; }
            }
        }
    }
    return err;
#endif
}
#endif
"""


_SPLIT_BF16 = "                memcpy(t, src, (size_t)K * 2);"
_SPLIT_ROUND = "                for (long long k = 0; k < K; k++) t[k] = lm_f32_to_bf16(src[k]);"
_SPLIT_F32 = ("                for (long long k = 0; k < K; k++) lm_amx_split(src[k], t + k, t + kpad + k, "
              "t + 2 * kpad + k);")


_SHORT = {"bfloat16": "b", "float32": "f", "bf16r": "r"}


def amx_name(a_store: str, b_store: str = "bfloat16") -> str:
    """The C name of the AMX GEMM for ``A`` stored as ``a_store`` (``"bfloat16"``, ``"float32"`` or ``"bf16r"``:
    float32 read rounded to bfloat16) and ``B`` as ``b_store`` (``"bfloat16"`` or ``"bf16r"``)."""
    return f"lm_amx_{_SHORT[a_store]}{_SHORT[b_store]}"


def amx_source(a_store: str, b_store: str = "bfloat16") -> str:
    """C source of :func:`amx_name` ``(a_store)`` (``lm_gemm_f32``'s signature with the stored operand types),
    compiled only where the build targets AMX (``LM_HAVE_AMX``); expects the helpers of
    :func:`luminal.codegen.gemm_lowp.lowp_source` (its scratch buffers) before it."""
    if a_store not in _SHORT or b_store not in ("bfloat16", "bf16r"):
        raise ValueError(f"the AMX GEMM takes A stored as bfloat16, float32 or bf16r and B as bfloat16 or bf16r, "
                         f"not {a_store!r} and {b_store!r}")
    split = {"bfloat16": _SPLIT_BF16, "float32": _SPLIT_F32, "bf16r": _SPLIT_ROUND}[a_store]
    body = (_KERNEL_ROWS + _KERNEL).replace("SPLIT", split).replace("PARTS", "3" if a_store == "float32" else "1")
    body = body.replace("ASTORE(", f"lm_amx_store_{_SHORT[a_store]}(").replace("ADIRECT", "1" if a_store == "bfloat16" else "0")
    body = body.replace("TA", "unsigned short" if a_store == "bfloat16" else "float")
    rounded = b_store == "bf16r"  # a float32 B is copied, rounded to bfloat16
    body = body.replace("TB", "float" if rounded else "unsigned short").replace("BCOPY", "1" if rounded else "0")
    body = body.replace("BCONV", "lm_f32_to_bf16" if rounded else "").replace("BVEC", "lm_amx_r16" if rounded else "lm_amx_b16")
    return _COMMON + body.replace("NAME", amx_name(a_store, b_store))
