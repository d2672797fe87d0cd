"""The AMX row kernel of :mod:`luminal.codegen.gemm_amx` (``NAME_rows``: many rows of A, a B to convert or pack,
operands not contiguous along K), as C text that :func:`~luminal.codegen.gemm_amx.amx_source` completes.

Its 16 x 16 tile products (``NAME_block``) run on AMX tiles, or -- on a CPU with AVX512-BF16 and without AMX
(``LM_AMX_DP``: Zen 4 / Zen 5, Cooper Lake) -- with ``vdpbf16ps``: one accumulator vector per row of the
result, one vector per pair-row of B's packed tile, each bfloat16 pair of A's tile-order copy broadcast (the
same pairs of exact products into float32 sums; subnormal inputs count as zero, as on AMX). The packing, the
blocking and the three ways of splitting the work over the threads are the same code.
"""

from __future__ import annotations

_KERNEL_ROWS = r"""
#ifdef LM_HAVE_AMX
#ifndef LM_AMX_ROWS_M
#define LM_AMX_ROWS_M 192  /* from this many rows of A on, NAME takes NAME_rows when B is read where it is stored */
#endif
#ifndef LM_AMX_COLS_BYTES
#define LM_AMX_COLS_BYTES (256 * 1024)  /* NAME_rows splits B's columns when A's bfloat16 copy is at most this */
#endif
#ifndef LM_AMX_COLS_CHUNK
#define LM_AMX_COLS_CHUNK (128 * 1024)  /* bytes of B's packed columns a thread works on at a time */
#endif
#ifndef LM_AMX_KSUM_MN
#define LM_AMX_KSUM_MN (64 * 1024)  /* NAME_rows splits K when C has at most this many elements ... */
#endif
#ifndef LM_AMX_KSUM_KB
#define LM_AMX_KSUM_KB 32  /* ... into chunks of this many K blocks (1024 K), when there are at least two */
#endif
#ifndef LM_AMX_KSUM_BYTES
#define LM_AMX_KSUM_BYTES (64LL << 20)  /* ... and of more, so that the partial Cs take at most this much */
#endif
#ifndef LM_AMX_ROWS_THREADS
#define LM_AMX_ROWS_THREADS 0  /* threads of the tile loop (0: all) */
#endif
/* NAME_packb: tile (nb, kb) of B pair-interleaved, (B[n][k], B[n][k + 1]) for the 16 columns n = nb*16... and
   the 16 pairs k = kb*32 + 2q, read along whichever of B's strides is 1 (vectorized), zero past N and K */
static inline void NAME_packb(const TB *B, long long sbn, long long sbk, long long N, long long K, long long nb,
                              long long kb, lm_amx_u32 *tile) {
    long long n0 = nb * 16, k0 = kb * 32;
    int full = n0 + 16 <= N && k0 + 32 <= K;
    if (full && sbk == 1) {  /* rows of B: 16 rows of 32 converted, then a 16 x 16 pair transpose */
        __m512i v[16];
        for (int j = 0; j < 16; j++) {
            const TB *src = B + (n0 + j) * sbn + k0;
            v[j] = BCOPY ? lm_amx_tops2(BVEC(src), BVEC(src + 16)) : _mm512_loadu_si512((const void *)src);  /* (pairs) */
        }
        lm_amx_tr32(v);
        for (int q = 0; q < 16; q++) _mm512_storeu_si512((void *)(tile + q * 16), v[q]);
    } else if (full && sbn == 1) {  /* columns of B (a transposed B): 16 contiguous n per k, two k interleaved */
        for (int q = 0; q < 16; q++) {
            const TB *s0 = B + n0 + (k0 + 2 * q) * sbk;
            __m512i lo = BVEC(s0), hi = BVEC(s0 + sbk);
            _mm512_storeu_si512((void *)(tile + q * 16), _mm512_or_si512(_mm512_srli_epi32(lo, 16), hi));
        }
    } else if (full) {
        for (int q = 0; q < 16; q++) {
            const TB *s0 = B + n0 * sbn + (k0 + 2 * q) * sbk, *s1 = s0 + sbk;
            for (int j = 0; j < 16; j++)
                tile[q * 16 + j] = (lm_amx_u32)BCONV(s0[j * sbn]) | ((lm_amx_u32)BCONV(s1[j * sbn]) << 16);
        }
    } else {  /* an edge: zero past N and K */
        for (int p = 0; p < 16; p++)
            for (int j = 0; j < 16; j++) {
                long long n = n0 + j, k = k0 + 2 * p;
                lm_amx_u32 lo = n < N && k < K ? BCONV(B[n * sbn + k * sbk]) : 0;
                lm_amx_u32 hi = n < N && k + 1 < K ? BCONV(B[n * sbn + (k + 1) * sbk]) : 0;
                tile[p * 16 + j] = lo | (hi << 16);
            }
    }
}
/* NAME_block: rows m0..m0+31 x columns n0..n0+31 of C (n0..n0+15 unless two), summed over the K blocks kb0..kb1-1,
   from A's tile-order copy ar (parts of apart elements; LM_AMX_AIDX over kblocks) and B's packed tiles w (K block
   kb at w + (kb - kb0) * 256, the next 16 columns wnext words further); the tile configuration is loaded */
#define LM_AMX_AIDX(m, k) (((((m) >> 5) * kblocks + ((k) >> 5)) * 2 + (((m) & 31) >> 4)) * 512 + ((m) & 15) * 32 + ((k) & 31))
#ifdef LM_AMX_DP
static inline void NAME_block(const unsigned short *ar, size_t apart, int parts, long long kblocks, long long kb0,
                              long long kb1, long long m0, const lm_amx_u32 *w, long long wnext, int two, float *C,
                              long long M, long long N, long long n0) {
    /* each 16 x 16 tile product with vdpbf16ps: a row of the result per accumulator, a pair-row of B's tile one
       vector, each pair of A broadcast from its tile-order copy */
    for (int q4 = 0; q4 < (two ? 4 : 2); q4++) {
        int h = two ? q4 / 2 : q4, t = two ? q4 % 2 : 0;  /* rows m0 + 16 h .., columns n0 + 16 t .. */
        long long r0 = m0 + 16 * h, cc = n0 + 16 * t;
        if (r0 >= M) continue;
        __m512 c[16];
        for (int r = 0; r < 16; r++) c[r] = _mm512_setzero_ps();
        for (long long kb = kb0; kb < kb1; kb++) {
            const lm_amx_u32 *bt = w + t * wnext + (kb - kb0) * 256;
            for (int q = 0; q < parts; q++) {
                const lm_amx_u32 *at = (const lm_amx_u32 *)(ar + q * apart + LM_AMX_AIDX(r0, kb * 32));
                for (int p = 0; p < 16; p++) {
                    __m512bh b = (__m512bh)_mm512_load_si512((const void *)(bt + p * 16));
                    for (int r = 0; r < 16; r++)
                        c[r] = _mm512_dpbf16_ps(c[r], (__m512bh)_mm512_set1_epi32((int)at[r * 16 + p]), b);
                }
            }
        }
        long long mm = M - r0 < 16 ? M - r0 : 16, nn = N - cc < 16 ? N - cc : 16;
        __mmask16 keep = (__mmask16)((1u << (nn > 0 ? nn : 0)) - 1u);
        for (long long r = 0; r < mm; r++) _mm512_mask_storeu_ps(C + (r0 + r) * N + cc, keep, c[r]);
    }
}
#else
static inline void NAME_block(const unsigned short *ar, size_t apart, int parts, long long kblocks, long long kb0,
                              long long kb1, long long m0, const lm_amx_u32 *w, long long wnext, int two, float *C,
                              long long M, long long N, long long n0) {
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    for (long long kb = kb0; kb < kb1; kb++) {
        _tile_loadd(6, w + (kb - kb0) * 256, 64);
        if (two) _tile_loadd(7, w + wnext + (kb - kb0) * 256, 64);
        for (int q = 0; q < parts; q++) {
            const unsigned short *x = ar + q * apart + LM_AMX_AIDX(m0, kb * 32);
            _tile_loadd(4, x, 64);
            _tile_loadd(5, x + 512, 64);
            _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(2, 5, 6);
            if (two) { _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(3, 5, 7); }
        }
    }
    if (m0 + 32 <= M && n0 + (two ? 32 : 16) <= N) {  /* tiles straight into C */
        _tile_stored(0, C + m0 * N + n0, N * 4); _tile_stored(2, C + (m0 + 16) * N + n0, N * 4);
        if (two) { _tile_stored(1, C + m0 * N + n0 + 16, N * 4); _tile_stored(3, C + (m0 + 16) * N + n0 + 16, N * 4); }
        LM_AMX_BARRIER;
    } else {
        float out[4][16 * 16] __attribute__((aligned(64)));
        _tile_stored(0, out[0], 64); _tile_stored(2, out[2], 64);
        if (two) { _tile_stored(1, out[1], 64); _tile_stored(3, out[3], 64); }
        LM_AMX_BARRIER;
        for (int q = 0; q < 4; q += two ? 1 : 2) {  /* tile q: rows of block q / 2, columns of n0 + (q % 2) * 16 */
            long long r0 = m0 + (q / 2) * 16, cc = n0 + (q % 2) * 16;
            long long mm = M - r0 < 16 ? M - r0 : 16, nn = N - cc < 16 ? N - cc : 16;
            for (long long i = 0; i < mm; i++) memcpy(C + (r0 + i) * N + cc, out[q] + i * 16, (size_t)(nn > 0 ? nn : 0) * 4);
        }
    }
}
#endif
/* NAME_rows: NAME for many rows of A (the mirror formulation). A's rows are the tiles' first operand (read where
   they are stored when A is bfloat16 contiguous along K, else converted once into a zero-padded bfloat16 copy,
   PARTS parts); B is packed once per call pair-interleaved, tile (nb, kb) holding (B[n][k], B[n][k + 1]) for 16
   columns n and 16 pairs k, read along whichever of its strides is 1; each 16 x 16 result tile is stored
   straight into C, and the epilogue runs on each block of rows while it is in the cache. */
static int NAME_rows(long long M, long long N, long long K, const TA *A, long long sam, long long sak,
                     const TB *B, long long sbn, long long sbk, float *C, lm_epilogue epi, void **bufs,
                     const long long *syms) {
    long long kblocks = (K + 31) / 32, kpad = kblocks * 32, nblocks = (N + 15) / 16, mpad = (M + 31) / 32 * 32;
    /* columns (few rows of A: its bfloat16 copy stays in the cache): the threads split B's columns, and each
       packs 32 of them at a time into its own buffer right before their tile products; else B is packed whole
       first and the threads split A's rows */
    int nthreads = LM_AMX_ROWS_THREADS > 0 ? LM_AMX_ROWS_THREADS : omp_get_max_threads();
    int cols = (double)mpad * (double)kpad * 2.0 * PARTS <= (double)LM_AMX_COLS_BYTES && nblocks >= 4;
    long long cpairs = LM_AMX_COLS_CHUNK / (kblocks * 2048);  /* pairs of 16-column blocks packed at a time */
    cpairs = cpairs < 1 ? 1 : cpairs > 16 ? 16 : cpairs;
    size_t bchunk = (size_t)(2 * cpairs * kblocks) * 256;  /* words of one thread's packed columns */
    /* K split (a small C over a long K: a weight gradient): fixed chunks of LM_AMX_KSUM_KB K blocks over the
       threads, each packing its chunk of B and storing a partial C; then C = the partials summed in chunk order,
       so the bits do not depend on the number of threads */
    int ksplit = !cols && (double)M * (double)N <= (double)LM_AMX_KSUM_MN && kblocks >= 2 * LM_AMX_KSUM_KB;
    /* (chunks of more K blocks when the partials would pass LM_AMX_KSUM_BYTES: a very long K) */
    long long ksumkb = LM_AMX_KSUM_KB, maxch = (long long)((double)LM_AMX_KSUM_BYTES / ((double)M * (double)N * 4.0));
    if (maxch < 2) maxch = 2;
    if ((kblocks + ksumkb - 1) / ksumkb > maxch) ksumkb = (kblocks + maxch - 1) / maxch;
    long long kchunks = (kblocks + ksumkb - 1) / ksumkb;
    size_t kwords = (size_t)nblocks * (size_t)ksumkb * 256;  /* words of one thread's packed chunk of B */
    lm_amx_u32 *bp = (lm_amx_u32 *)lm_og_grow(&lm_lp_buf[2], &lm_lp_cap[2], cols ? (size_t)nthreads * bchunk * 4 :
                                              ksplit ? (size_t)nthreads * kwords * 4 : (size_t)(nblocks * kblocks) * 1024);
    if (!bp) return LM_AMX_UNUSABLE;
    float *part = ksplit ? (float *)lm_og_grow(&lm_lp_buf[0], &lm_lp_cap[0], (size_t)kchunks * (size_t)(M * N) * 4) : NULL;
    if (ksplit && !part) return LM_AMX_UNUSABLE;
    if (!cols && !ksplit) {
        #pragma omp parallel for schedule(static) if(!omp_in_parallel() && (double)N * (double)K >= (double)LM_OWN_GEMM_PAR_MACS)
        for (long long nb = 0; nb < nblocks; nb++)
            for (long long kb = 0; kb < kblocks; kb++) NAME_packb(B, sbn, sbk, N, K, nb, kb, bp + (nb * kblocks + kb) * 256);
    }
    /* A as PARTS bfloat16 copies of mpad x kpad (zero-padded) in tile order: each 16 x 32 tile of A (rows m0..,
       k0..) is one contiguous 1 KB block, the two tiles of a 32-row block next to each other, then the next 32 K
       (LM_AMX_AIDX): the tile loop reads A at stride 64 bytes, sequentially (read where A is stored, with the
       row stride of A, its tile loads missed the cache: about 2x slower at 1024^3) */
    const unsigned short *ar;
    {
        unsigned short *ac = (unsigned short *)lm_og_grow(&lm_lp_buf[3], &lm_lp_cap[3], PARTS * (size_t)(mpad * kpad) * 2);
        if (!ac) return LM_AMX_UNUSABLE;
        size_t part = (size_t)(mpad * kpad);
        #pragma omp parallel for schedule(static) if(!omp_in_parallel() && (double)M * (double)K >= (double)LM_OWN_GEMM_PAR_MACS)
        for (long long m0 = 0; m0 < mpad; m0 += 32) {
            for (long long k0 = 0; k0 < kpad; k0 += 32) {
                if (m0 + 32 > M || k0 + 32 > K)
                    for (int q = 0; q < PARTS; q++)
                        for (long long m = m0; m < m0 + 32; m++) memset(ac + q * part + LM_AMX_AIDX(m, k0), 0, 64);
                long long m1 = m0 + 32 < M ? m0 + 32 : M, k1 = k0 + 32 < K ? k0 + 32 : K;
                if (ADIRECT && sak == 1 && k1 - k0 == 32) {  /* bfloat16 rows: 64-byte copies */
                    for (long long m = m0; m < m1; m++) memcpy(ac + LM_AMX_AIDX(m, k0), A + m * sam + k0, 64);
                } else if (sam == 1 && sak != 1) {  /* A^T stored row-major: rows of k converted, then 32 x 32 transposes */
                    unsigned short tmp[PARTS][32][32] __attribute__((aligned(64)));
                    if (m1 - m0 < 32 || k1 - k0 < 32) memset(tmp, 0, sizeof tmp);
                    for (long long k = k0; k < k1; k++) {
                        const TA *src = A + k * sak;
                        for (long long m = m0; m < m1; m++) ASTORE(src[m], tmp[0][k - k0], m - m0, 1024);
                    }
                    for (int q = 0; q < PARTS; q++) {
                        __m512i v[32];
                        for (int r = 0; r < 32; r++) v[r] = _mm512_load_si512((const void *)tmp[q][r]);
                        lm_amx_tr16(v);
                        for (int r = 0; r < 32; r++)
                            if (m0 + r < M) _mm512_store_si512((void *)(ac + q * part + LM_AMX_AIDX(m0 + r, k0)), v[r]);
                    }
                } else if (sak == 1) {  /* (a row's 32 values are contiguous in the tile order too: vectorized) */
                    for (long long m = m0; m < m1; m++) {
                        const TA *restrict src = A + m * sam + k0;
                        unsigned short *restrict dst = ac + LM_AMX_AIDX(m, k0);
                        #pragma omp simd
                        for (long long k = 0; k < k1 - k0; k++) ASTORE(src[k], dst, k, part);
                    }
                } else {
                    for (long long m = m0; m < m1; m++)
                        for (long long k = k0; k < k1; k++) ASTORE(A[m * sam + k * sak], ac, LM_AMX_AIDX(m, k), part);
                }
            }
        }
        ar = ac;
    }
    size_t apart = (size_t)(mpad * kpad);
    int parts = PARTS;
    if (parts > 1) {  /* a float32 A whose values are all bfloat16 already (data from bfloat16, constants, one-hot
                         rows): its lower parts are zero, and one product is the whole product */
        const uint64_t *low = (const uint64_t *)(ar + apart);
        size_t words = (size_t)(parts - 1) * apart / 4;
        uint64_t any = 0;
        #pragma omp parallel for simd reduction(|:any) if(!omp_in_parallel() && words >= (1u << 18))
        for (size_t i = 0; i < words; i++) any |= low[i];
        if (!any) parts = 1;
    }
    long long mpairs = mpad / 32, nchunk = ((1LL << 20) / (kpad * 32)) & ~1LL;  /* B's 16-column blocks per 1 MB */
    if (nchunk < 2) nchunk = 2;
    int err = 0;
    #pragma omp parallel num_threads(nthreads) if(!omp_in_parallel() && (double)M * (double)N * (double)K >= (double)LM_OWN_GEMM_PAR_MACS)
    {
        long long nt = omp_get_num_threads(), t = omp_get_thread_num();
        if (cols) {  /* this thread's chunks of cpairs pairs of 16-column blocks: packed, then every row of C over them */
            long long pairs = (nblocks + 1) / 2, chunks = (pairs + cpairs - 1) / cpairs;
            long long lo = chunks * t / nt, hi = chunks * (t + 1) / nt;
            lm_amx_u32 *bl = bp + (size_t)t * bchunk;
            if (hi > lo) lm_amx_config();
            for (long long ch = lo; ch < hi; ch++) {
                long long nb0 = ch * cpairs * 2, nb1 = nb0 + cpairs * 2 < nblocks ? nb0 + cpairs * 2 : nblocks;
                for (long long nb = nb0; nb < nb1; nb++)
                    for (long long kb = 0; kb < kblocks; kb++)
                        NAME_packb(B, sbn, sbk, N, K, nb, kb, bl + ((nb - nb0) * kblocks + kb) * 256);
                for (long long mp = 0; mp < mpairs; mp++)
                    for (long long nb = nb0; nb < nb1; nb += 2)
                        NAME_block(ar, apart, parts, kblocks, 0, kblocks, mp * 32, bl + (nb - nb0) * kblocks * 256, kblocks * 256,
                                   nb + 1 < nb1, C, M, N, nb * 16);
                long long e1 = nb1 * 16 < N ? nb1 * 16 : N;
                int e = epi ? epi(bufs, syms, 0, M, nb0 * 16, e1) : 0;
                if (e) {
                    #pragma omp critical(lm_own_gemm_err)
                    { if (!err) err = e; }
                }
            }
            if (hi > lo) lm_amx_release();
        } else if (ksplit) {  /* this thread's K chunks, each into its partial C */
            long long lo = kchunks * t / nt, hi = kchunks * (t + 1) / nt;
            lm_amx_u32 *bl = bp + (size_t)t * kwords;
            if (hi > lo) lm_amx_config();
            for (long long c = lo; c < hi; c++) {
                long long kb0 = c * ksumkb, kb1 = kb0 + ksumkb < kblocks ? kb0 + ksumkb : kblocks;
                long long nk = kb1 - kb0;
                for (long long nb = 0; nb < nblocks; nb++)
                    for (long long kb = kb0; kb < kb1; kb++) NAME_packb(B, sbn, sbk, N, K, nb, kb, bl + (nb * nk + kb - kb0) * 256);
                float *P = part + (size_t)c * (size_t)(M * N);
                for (long long mp = 0; mp < mpairs; mp++)
                    for (long long nb = 0; nb < nblocks; nb += 2)
                        NAME_block(ar, apart, parts, kblocks, kb0, kb1, mp * 32, bl + nb * nk * 256, nk * 256,
                                   nb + 1 < nblocks, P, M, N, nb * 16);
            }
            if (hi > lo) lm_amx_release();
            #pragma omp barrier
            long long m0 = M * t / nt, m1 = M * (t + 1) / nt;
            for (long long m = m0; m < m1; m++) {
                float *restrict dst = C + m * N;
                const float *restrict src = part + m * N;
                #pragma omp simd
                for (long long n = 0; n < N; n++) dst[n] = src[n];
                for (long long c = 1; c < kchunks; c++) {
                    const float *restrict pc = part + (size_t)c * (size_t)(M * N) + m * N;
                    #pragma omp simd
                    for (long long n = 0; n < N; n++) dst[n] += pc[n];
                }
            }
            int e = epi && m1 > m0 ? epi(bufs, syms, m0, m1, 0, N) : 0;
            if (e) {
                #pragma omp critical(lm_own_gemm_err)
                { if (!err) err = e; }
            }
        } else {  /* this thread's 32-row blocks of A over B's packed columns, about 1 MB of B at a time */
            long long lo = mpairs * t / nt, hi = mpairs * (t + 1) / nt;
            if (hi > lo) lm_amx_config();
            for (long long c0 = 0; c0 < nblocks && hi > lo; c0 += nchunk) {
                long long c1 = c0 + nchunk < nblocks ? c0 + nchunk : nblocks;
                for (long long mp = lo; mp < hi; mp++) {
                    long long m0 = mp * 32;
                    for (long long nb = c0; nb < c1; nb += 2)
                        NAME_block(ar, apart, parts, kblocks, 0, kblocks, m0, bp + nb * kblocks * 256, kblocks * 256, nb + 1 < c1, C,
                                   M, N, nb * 16);
                    long long m1 = m0 + 32 < M ? m0 + 32 : M, e1 = c1 * 16 < N ? c1 * 16 : N;
                    int e = epi && m1 > m0 ? epi(bufs, syms, m0, m1, c0 * 16, e1) : 0;
                    if (e) {
                        #pragma omp critical(lm_own_gemm_err)
                        { if (!err) err = e; }
                    }
                }
            }
            if (hi > lo) lm_amx_release();
        }
    }
    return err;
}
#undef LM_AMX_AIDX
#endif
"""
