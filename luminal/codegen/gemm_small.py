"""GEMMs at small M: the ``"auto"`` implementation (a run-time dispatch by shape class), a packing-free
dot-product kernel and a stand-alone GEMV.

``auto_source(dtype)`` renders ``lm_gemm_auto_f32`` / ``lm_gemm_auto_f64`` (the signature and semantics of
``lm_gemm_f32`` in :mod:`luminal.codegen.c_support`), which picks per call from the run-time sizes, so one
symbolic program serves decoding, one sequence and large batches:

* ``M == 1`` or ``N == 1`` (token-by-token decoding): :func:`gemv_source`, the own GEMM's GEMV loops rendered
  alone (no packing). OpenBLAS's ``sgemm`` with M == 1 and an ``N x K`` weight (1 x 768 x 3072) was 3.3x slower.
* ``M <= LM_AUTO_SMALL_M`` (64; one sequence at inference) with both operands contiguous along K (activations
  times PyTorch-layout ``N x K`` weights), K >= 256 (K >= 128 at M <= 16) and N >= 48 (the kernel splits N over
  the threads in blocks of 12 columns): :func:`dot_source`, which does not transpose-pack the weight (the packing
  GEMMs re-pack it on every call: half their time at M = 32).
* A contiguous along K or M and B along N or K (a convolution's weight times its im2col columns, an activation times
  an ONNX ``K x N`` weight, a linear layer's input or weight gradient, two row-major matrices) with
  ``M >= AUTO_STREAM_M`` (96) rows and at least 16 columns (64 below 128 rows), or with 16 to 95 rows, more
  than ``AUTO_STREAM_N`` (1024) columns and at least 2^22 multiply-adds (the threads then split N):
  :func:`~luminal.codegen.gemm_stream.stream_source`, which reads A where it is stored (1.0-1.7x OpenBLAS there,
  2048^3 included; OpenBLAS was ahead by up to 2x at 8 columns, 1.3x at 16 columns and 96 rows, and on products
  of fewer than 2^22 multiply-adds with fewer rows).
* everything else: OpenBLAS (``lm_gemm_f32``), the faster one at large M here.

No packing GEMM is part of ``"auto"``: rendering one into every program cost seconds of compile time (BERT: 1.5
-> 11 s on the loaded 2-core machine with three GEMM variants). ``LUMINAL_GEMM=auto`` (the default when OpenBLAS
is installed), ``blas`` or ``own`` pick the implementation of GEMMs without a tuned entry (see
:func:`luminal.runtime.search.default_choice`); the measured search has ``"dot"`` and :func:`small_config` (an
8 x 48 own-GEMM tile for small M) among its candidates.
"""

from __future__ import annotations

import os
import re

from .gemm import _COMMON, GEMV_ROWS, store_cols
from .gemm_lowp import STORE_TYPES, convert_loop
from .gemm_stream import prefetch_default
from .gemm_config import _BLOCKS, _TILES, GemmConfig, _make, _width, default_config, vector_bytes

AUTO_SMALL_M = 64  # rows up to which "auto" runs the dot-product kernel (LM_AUTO_SMALL_M in the C)
# ... with at least AUTO_DOT_N columns and a sum of at least AUTO_DOT_K (AUTO_TINY_K for at most AUTO_TINY_M rows)
AUTO_DOT_N, AUTO_DOT_K, AUTO_TINY_M, AUTO_TINY_K = 48, 256, 16, 128
# "auto" runs the streaming kernel (A contiguous along K or M, B along N or K) from AUTO_STREAM_M rows with at least
# AUTO_STREAM_MIN_N columns (AUTO_STREAM_FEW_N below AUTO_STREAM_FULL_M rows) ...
AUTO_STREAM_M, AUTO_STREAM_FULL_M, AUTO_STREAM_MIN_N, AUTO_STREAM_FEW_N = 96, 128, 16, 64
# ... and below AUTO_STREAM_M rows, from AUTO_STREAM_FEW_M rows with more than AUTO_STREAM_N columns and at least
# AUTO_STREAM_MACS multiply-adds (MobileNet's 1x1 convolutions at batch 8, 16-64 x 6272-25088 x 16-144)
AUTO_STREAM_FEW_M, AUTO_STREAM_N, AUTO_STREAM_MACS = 16, 1024, 1 << 22


def stream_enabled() -> bool:
    """Whether ``"auto"`` runs the streaming kernel at all (``LUMINAL_GEMM_STREAM=0`` turns it off: OpenBLAS
    there, as before it existed)."""
    return _stream_mode() != "0"


def stream_nk_enabled() -> bool:
    """Whether ``"auto"`` streams products whose B is stored ``N x K`` (PyTorch's weight layout; its blocks copied
    transposed); ``LUMINAL_GEMM_STREAM=kn`` keeps the streaming kernel to B stored ``K x N`` (OpenBLAS for the
    rest, as before the transposed copy existed)."""
    return _stream_mode() == "1"


def _stream_mode() -> str:
    mode = os.environ.get("LUMINAL_GEMM_STREAM", "1") or "1"
    if mode not in ("0", "1", "kn"):
        raise ValueError(f"LUMINAL_GEMM_STREAM={mode!r}: expected '1' (the default), '0' or 'kn'")
    return mode


def stream_fits(m: int, n: int, k: int | None, sak: int | None, sbn: int | None, sam: int | None = None,
                sbk: int | None = None) -> bool:
    """Whether ``"auto"`` runs the streaming kernel for an ``m x n x k`` product with A's strides ``sak`` along K
    and ``sam`` along M (one of them 1) and B's ``sbn`` along N or ``sbk`` along K (one of them 1); an argument of
    None (not known before run time) counts as one that fits."""
    a_ok = sak in (None, 1) or sam in (None, 1)
    b_ok = sbn in (None, 1) or (stream_nk_enabled() and sbk in (None, 1))
    if not (stream_enabled() and a_ok and b_ok and (k is None or k > 0)):
        return False
    if m < AUTO_STREAM_M:  # few rows: only wide products with enough work
        return m >= AUTO_STREAM_FEW_M and n > AUTO_STREAM_N and (k is None or m * n * k >= AUTO_STREAM_MACS)
    return n >= (AUTO_STREAM_MIN_N if m >= AUTO_STREAM_FULL_M else AUTO_STREAM_FEW_N)


def auto_kernel(m: int, n: int, k: int, sak: int, sbn: int, sbk: int, *, sam: int) -> str:
    """Which kernel ``lm_gemm_auto_*`` runs for an ``m x n x k`` product with operand strides ``sam`` and ``sak``
    (A along M and K), ``sbn`` and ``sbk`` (B along N and K) (the rule of its C, :data:`_AUTO`): ``"gemv"``,
    ``"dot"``, ``"stream"`` or ``"blas"``."""
    if (m == 1 or n == 1) and k > 0:
        return "gemv"
    if m <= AUTO_SMALL_M and n >= AUTO_DOT_N and sak == 1 and sbk == 1 and (
            k >= AUTO_DOT_K or m <= AUTO_TINY_M and k >= AUTO_TINY_K):
        return "dot"
    if stream_fits(m, n, k, sak, sbn, sam, sbk):
        return "stream"
    return "blas"


def small_config(dtype: str) -> GemmConfig:
    """The own-GEMM configuration the search adds to its candidates for ``M <= AUTO_SMALL_M`` rows.

    With AVX-512 the second register tile of the table (f32 8 x 48, f64 8 x 24: 24 accumulators, 8 rows so 16,
    32 and 64 rows need no edge tile) with K blocks of at most 256; other vector widths keep the default tile.
    """
    _width(dtype)
    if vector_bytes() == 64:
        mr, nr = _TILES[(64, dtype)][1]
        _, mc, nc = _BLOCKS[(64, dtype)]
        return _make(dtype, mr, nr, 256, mc, nc)
    return default_config(dtype)


def auto_parts(dtype: str) -> dict[str, str]:
    """The C functions ``"auto"`` dispatches to, by role: ``"gemv"`` (M == 1 or N == 1: :func:`gemv_source`),
    ``"dot"`` (small M, both operands contiguous along K: :func:`dot_source`), ``"stream"`` (larger M, A
    contiguous along K or M and B along N or K: :func:`~luminal.codegen.gemm_stream.stream_source`) and ``"blas"`` (the
    rest, and the fallback of the others: ``lm_gemm_f32`` / ``lm_gemm_f64`` of :mod:`luminal.codegen.c_support`)."""
    _width(dtype)
    short = "f32" if dtype == "float32" else "f64"
    return {"gemv": f"lm_og_gemv_{short}", "dot": f"lm_og_dot_{short}", "stream": f"lm_og_stream_{short}",
            "blas": f"lm_gemm_{short}"}


def dot_tile(dtype: str) -> tuple[int, int, int]:
    """``(ma, nb, kc)`` of the dot-product kernel for ``dtype`` at this machine's vector width: ``ma`` rows of A
    times ``nb`` rows of B (``ma * nb`` vector accumulators along K, plus ``ma`` vectors of A and one of B in the
    registers: 2 x 12 with 32 vector registers, 2 x 6 with 16) over K blocks of ``kc`` (the ``nb x kc`` block of
    B, 24 KiB, stays in L1 while every row of A passes)."""
    w = _width(dtype)
    nb = 12 if vector_bytes() == 64 else 6
    kc = max(w, (24 << 10) // (nb * (4 if dtype == "float32" else 8)) // w * w)
    return 2, nb, kc


def _merge_tree(w: int, nb: int) -> tuple[list[str], list[tuple[str, list]]]:
    """C statements that reduce the ``nb`` accumulators ``aI_0 .. aI_{nb-1}`` (``I`` left as a placeholder) to
    their lane sums, and the final vectors as ``(name, [source column or None per lane])``. Two vectors holding
    ``k`` sources of ``g = w / k`` lanes each merge into one of ``2k`` sources of ``g / 2`` lanes: two shuffles
    and an add."""
    vecs = [(f"aI_{j}", [j]) for j in range(nb)]
    lines, tmp = [], 0
    while True:
        g = w // len(vecs[0][1])
        if g == 1:
            return lines, vecs
        nxt = []
        for i in range(0, len(vecs), 2):
            (xn, xs) = vecs[i]
            (yn, ys) = vecs[i + 1] if i + 1 < len(vecs) else ("NAME_zero", [None] * len(xs))
            h = g // 2
            lo = [s * g + t for s in range(len(xs)) for t in range(h)] + \
                 [w + s * g + t for s in range(len(ys)) for t in range(h)]
            hi = [v + h for v in lo]
            name = f"rI_{tmp}"
            tmp += 1
            lines.append(f"NAME_v {name} = __builtin_shuffle({xn}, {yn}, (NAME_vi){{{', '.join(map(str, lo))}}})"
                         f" + __builtin_shuffle({xn}, {yn}, (NAME_vi){{{', '.join(map(str, hi))}}});")
            nxt.append((name, xs + ys))
        vecs = nxt


_DOT = r"""
/* NAME: C = A . (B transposed) for A (M x K) and B (N x K) both contiguous along K: MA x NB tiles of dot
   products along K over copies of the operands (luminal.codegen.gemm_small). The copies are plain row copies
   (no transposition) into rows LDP elements apart, 64 bytes more than a K block, so that the rows of a block
   spread over the L1 sets (rows of the operands themselves, K * 4 bytes apart, can all fall into a few sets), and
   zero-padded to whole vectors along K. */
#ifndef LM_OWN_GEMM_DOT_COMMON
#define LM_OWN_GEMM_DOT_COMMON
#ifndef LM_STREAM_PREFETCH  /* 0: the streaming and dot kernels prefetch less of B (:mod:`.gemm_stream`) */
#define LM_STREAM_PREFETCH PFDEFAULT
#endif
__attribute__((weak, visibility("hidden"))) __thread void *lm_og_dot_abuf, *lm_og_dot_bbuf;
__attribute__((weak, visibility("hidden"))) __thread size_t lm_og_dot_acap, lm_og_dot_bcap;
__attribute__((weak, visibility("hidden"))) void lm_release_og_dot(void) {
    free(lm_og_dot_abuf); free(lm_og_dot_bbuf); lm_og_dot_abuf = lm_og_dot_bbuf = NULL;
    lm_og_dot_acap = lm_og_dot_bcap = 0;
}
/* (only where the vector fits one register: a build without -march=native, e.g. the sanitizer build, has
   no register for a 64-byte vector and the constraint would be impossible) */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && \
    (VB == 16 || (VB == 32 && defined(__AVX__)) || (VB == 64 && defined(__AVX512F__)))
#define LM_OG_DOT_KEEP(v) __asm__("" : "+v"(v))
#else
#define LM_OG_DOT_KEEP(v) ((void)0)
#endif
#endif
typedef T NAME_v __attribute__((vector_size(VB)));
typedef ITYPE NAME_vi __attribute__((vector_size(VB)));
typedef S NAME_x __attribute__((vector_size(VB)));  /* a vector of the copies' elements */
static const NAME_v NAME_zero = {0};
/* rows [0, rows) of c (rows <= MA) x columns [0, cols) (cols <= NB) (+)= the MA rows at a . the NB rows at b over
   kv (a multiple of KW) elements; a and b are VB-aligned copies with rows LDP apart */
static __attribute__((noinline)) void NAME_tile(long long kv, const S *a, const S *b, T *restrict c, long long ldc,
                                                 int rows, int cols, int acc) {
    a = (const S *)__builtin_assume_aligned(a, VB);
    b = (const S *)__builtin_assume_aligned(b, VB);
DECLS
    for (long long k = 0; k < kv; k += KW) {
        NAME_x x0 = *(const NAME_x *)(a + k), x1 = *(const NAME_x *)(a + LDP + k), y;
BODY
    }
REDUCE
}
COPIESstatic int NAME(long long M, long long N, long long K, const TA *A, long long sam, long long sak,
                const TB *B, long long sbn, long long sbk, T *C, lm_epilogue epi, void **bufs,
                const long long *syms) {
    if (M <= 1 || N <= 1 || K <= 0 || sak != 1 || sbk != 1)
        return FALLBACK(M, N, K, A, sam, sak, B, sbn, sbk, C, epi, bufs, syms);
    int err = 0;
    long long mr = (M + MA - 1) / MA * MA;
    #pragma omp parallel if(!omp_in_parallel() && (double)M * (double)N * (double)K >= (double)LM_OWN_GEMM_PAR_MACS)
    {
        long long nt = omp_get_num_threads(), t = omp_get_thread_num();
        long long blocks = (N + NB - 1) / NB, lo = blocks * t / nt * NB, hi = blocks * (t + 1) / nt * NB;
        if (hi > N) hi = N;
        S *ab = (S *)lm_og_grow(&lm_og_dot_abuf, &lm_og_dot_acap, (size_t)(mr * LDP) * sizeof(S));
        S *bb = (S *)lm_og_grow(&lm_og_dot_bbuf, &lm_og_dot_bcap, (size_t)(NB * LDP) * sizeof(S));
        if (hi > lo && (!ab || !bb)) {  /* no memory for the copies: plain loops over this thread's columns */
            for (long long m = 0; m < M; m++)
                for (long long n = lo; n < hi; n++) {
                    T acc = 0;
                    for (long long k = 0; k < K; k++) acc += CVA(A[m * sam + k]) * CVB(B[n * sbn + k]);
                    C[m * N + n] = acc;
                }
            int e = epi ? epi(bufs, syms, 0, M, lo, hi) : 0;
            if (e) {
                #pragma omp critical(lm_own_gemm_err)
                { if (!err) err = e; }
            }
            lo = hi;
        }
        /* column blocks of about LM_OWN_GEMM_EPI_COLS: the epilogue runs on each while it is in cache */
        long long jcols = (LM_OWN_GEMM_EPI_COLS + NB - 1) / NB * NB;
        for (long long jc = lo; jc < hi; jc += jcols) {
            long long jn = hi - jc < jcols ? hi - jc : jcols;
            for (long long pc = 0; pc < K; pc += KCD) {
                long long kb = K - pc < KCD ? K - pc : KCD, kv = (kb + KW - 1) / KW * KW;
                NAME_copya(M, mr, kb, kv, A + pc, sam, ab);
                for (long long n0 = jc; n0 < jc + jn; n0 += NB) {
                    int cols = jc + jn - n0 < NB ? (int)(jc + jn - n0) : NB;
                    NAME_copyb(cols, NB, kb, kv, B + n0 * sbn + pc, sbn, bb);
                    /* the next block of B (weights: usually not in cache; the next rows of this K block, else the
                       first rows of the next K block or column range) is prefetched into L2 a share per tile, so
                       its copy does not wait on memory */
                    long long pn = n0 + NB, pk = pc, pkb = kb, pend = jc + jn;
                    if (pn >= pend && LM_STREAM_PREFETCH) {
                        pn = jc; pk = pc + KCD;
                        if (pk >= K) { pn = jc + jn; pk = 0; pend = hi - pn < jcols ? hi : pn + jcols; }
                        pkb = K - pk < KCD ? K - pk : KCD;
                    }
                    long long nr = pend - pn < NB ? pend - pn : NB;
                    /* (a row need not start on a line: one line more, else each row's last line is missed and
                       its copy waits on memory: a 32 x 384 x 1536 product from memory 134 -> 165 GFLOP/s) */
                    long long lines = (pkb * (long long)sizeof(TB) + 63) / 64 + LM_STREAM_PREFETCH;
                    long long total = nr > 0 ? nr * lines : 0;
                    long long per = (total + (M + MA - 1) / MA - 1) / ((M + MA - 1) / MA), prow = 0, pline = 0;
                    const char *next = (const char *)(B + pn * sbn + pk);
                    for (long long m0 = 0; m0 < M; m0 += MA) {
                        NAME_tile(kv, ab + m0 * LDP, bb, C + m0 * N + n0, N, M - m0 < MA ? (int)(M - m0) : MA,
                                  cols, pc > 0);
                        for (long long q = 0; q < per && prow < nr; q++) {
                            __builtin_prefetch(next + prow * sbn * (long long)sizeof(TB) + pline * 64, 0, 2);
                            if (++pline == lines) { pline = 0; prow++; }
                        }
                    }
                }
            }
            if (epi) {
                int e = epi(bufs, syms, 0, M, jc, jc + jn);
                if (e) {
                    #pragma omp critical(lm_own_gemm_err)
                    { if (!err) err = e; }
                }
            }
        }
    }
    return err;
}
"""


_COPY = r"""
/* rows [0, rows) of src (row stride ld), elements [0, kb), into dst (row stride LDP), zero-padded to kv elements
   and to `all` rows (an operand stored as float16 / bfloat16 is converted to T on the way) */
static inline void NAME_copySIDE(long long rows, long long all, long long kb, long long kv, const SRC *src, long long ld,
                                 S *restrict dst) {
    for (long long r = 0; r < all; r++) {
        S *d = dst + r * LDP;
        if (r < rows) {
            MOVE
            memset(d + kb, 0, (size_t)(kv - kb) * sizeof(S));
        } else {
            memset(d, 0, (size_t)kv * sizeof(S));
        }
    }
}
"""


def dot_source(dtype: str, name: str, fallback: str, a_store: str | None = None, b_store: str | None = None,
               bf16_pairs: bool = False) -> str:
    """C source of ``static int NAME(M, N, K, A, sam, sak, B, sbn, sbk, C, epi, bufs, syms)`` with the semantics
    of ``lm_gemm_f32``: the dot-product GEMM for A and B both contiguous along K (``sak == sbk == 1``: a row-major
    activation times an ``N x K`` weight, PyTorch's layout), which packs nothing, so its cost at small M is the
    multiply-adds alone (the packing GEMMs re-pack every weight on every call: half the time at M = 32). N is
    split over the threads in blocks of ``nb`` columns (from ``LM_OWN_GEMM_PAR_MACS`` multiply-adds on, outside
    a parallel region); the epilogue runs on each thread's columns in blocks of about ``LM_OWN_GEMM_EPI_COLS``.
    Other layouts, M <= 1, N <= 1 and K == 0 call ``fallback`` (a function with the same signature, rendered
    before this text). The text starts with the own GEMM's common header (include-guarded: its packing-buffer
    allocator and thresholds).

    ``a_store`` / ``b_store`` (``"bfloat16"`` or ``"float16"``; default ``dtype``) render a variant whose operand
    is stored in that type and converted to ``dtype`` while it is copied (:mod:`luminal.codegen.gemm_lowp`);
    ``fallback`` then takes the same operand types. ``bf16_pairs`` (both operands bfloat16) keeps the copies in
    bfloat16 and multiplies with AVX512-BF16's ``vdpbf16ps`` (pairs of exact products added into float32 lanes:
    twice the multiply-adds per instruction of a float32 FMA); the caller guards it with ``__AVX512BF16__``.
    """
    for n in (name, fallback):
        if not re.fullmatch(r"[A-Za-z_]\w*", n):
            raise ValueError(f"not a C identifier: {n!r}")
    w = _width(dtype)
    ma, nb, kc = dot_tile(dtype)
    ctype = "float" if dtype == "float32" else "double"
    itype = "int" if dtype == "float32" else "long long"
    decls = [f"    NAME_v " + ", ".join(f"a{i}_{j} = {{0}}" for j in range(nb)) + ";" for i in range(ma)]
    # (the empty asm keeps y in a register: else GCC folds the load into both FMAs, two loads per vector of B)
    if bf16_pairs:
        if (a_store, b_store, dtype, vector_bytes()) != ("bfloat16", "bfloat16", "float32", 64):
            raise ValueError("bf16_pairs needs two bfloat16 operands, float32 output and 64-byte vectors")
        step = ("a{i}_{j} = (NAME_v)_mm512_dpbf16_ps((__m512)a{i}_{j}, (__m512bh)x{i}, (__m512bh)y);")
        body = [f"        y = *(const NAME_x *)(b + {j} * LDP + k); LM_OG_DOT_KEEP(y); "
                + step.format(i=0, j=j) + " " + step.format(i=1, j=j) for j in range(nb)]
    else:
        body = [f"        y = *(const NAME_x *)(b + {j} * LDP + k); LM_OG_DOT_KEEP(y); a0_{j} += x0 * y; "
                f"a1_{j} += x1 * y;" for j in range(nb)]
    tree, finals = _merge_tree(w, nb)
    order = [col for _, srcs in finals for col in srcs]
    if order[:nb] != list(range(nb)):  # (the merge keeps the columns in order, padding at the end)
        raise AssertionError(f"dot kernel: unexpected lane order {order}")
    reduce = []
    for i in range(ma):
        cond = "" if i == 0 else f"if (rows > {i}) "
        reduce.append(f"    {cond}{{")
        reduce += ["        " + line.replace("aI_", f"a{i}_").replace("rI_", f"r{i}_") for line in tree]
        reduce.append(f"        T *ci = c + {i} * ldc; T s[{len(finals) * w}];")
        for f, (vn, _) in enumerate(finals):
            vn = vn.replace("rI_", f"r{i}_").replace("aI_", f"a{i}_")
            reduce.append(f"        memcpy(s + {f * w}, &{vn}, VB);")
        reduce += ["        if (cols == NB) {",
                   "            if (acc) for (int j = 0; j < NB; j++) ci[j] += s[j];",
                   "            else memcpy(ci, s, NB * sizeof(T));",
                   "        } else {",
                   "            lm_og_store_cols_T(ci, s, cols, acc);",
                   "        }"]
        reduce.append("    }")
    copy_type = "bfloat16" if bf16_pairs else dtype  # the element type of the copies
    copies = []
    for side, store in (("a", a_store or dtype), ("b", b_store or dtype)):
        if store == copy_type:
            move = "memcpy(d, src + r * ld, (size_t)kb * sizeof(S));"
        else:
            move = convert_loop(store, "d", "(src + r * ld)", "kb")
        copies.append(_COPY.replace("SIDE", side).replace("SRC", STORE_TYPES[store]).replace("MOVE", move))
    src = (_DOT.replace("COPIES", "".join(copies)).replace("DECLS", "\n".join(decls)).replace("BODY", "\n".join(body))
           .replace("REDUCE", "\n".join(reduce)))
    copy_size = {"bfloat16": 2, "float32": 4, "float64": 8}[copy_type]
    subs = {"PFDEFAULT": prefetch_default(), "MA": str(ma), "NB": str(nb), "KCD": str(kc), "W": str(w),
            "VB": str(vector_bytes()), "T": ctype,
            "ITYPE": itype, "FALLBACK": fallback, "LDP": str(kc + 64 // copy_size), "S": STORE_TYPES[copy_type],
            "KW": str(w * (4 // copy_size if bf16_pairs else 1)),
            "TA": STORE_TYPES[a_store or dtype], "TB": STORE_TYPES[b_store or dtype],
            "CVA": "" if (a_store or dtype) == dtype else "lm_cv_" + a_store,
            "CVB": "" if (b_store or dtype) == dtype else "lm_cv_" + b_store}
    src = re.sub(r"\b(MA|NB|KCD|LDP|KW|W|VB|TA|TB|S|T|ITYPE|FALLBACK|CVA|CVB|PFDEFAULT)\b",
                 lambda m: subs[m.group(1)], src)
    src = src.replace("store_cols_T", "store_cols_" + ctype)
    return _COMMON + store_cols(ctype) + re.sub(r"\bNAME", name, src)


_GEMV = r"""
/* NAME: matrix-vector products (M == 1 or N == 1) without packing, the output split over the threads; any other
   shape goes to FALLBACK (luminal.codegen.gemm_small; the same loops as the own GEMM's GEMV path, rendered alone
   so that a program does not compile a whole packing GEMM for them) */
typedef T NAME_v __attribute__((vector_size(VB)));
""" + GEMV_ROWS + r"""static int NAME(long long M, long long N, long long K, const T *A, long long sam, long long sak,
                const T *B, long long sbn, long long sbk, T *C, lm_epilogue epi, void **bufs,
                const long long *syms) {
    if ((M != 1 && N != 1) || M <= 0 || N <= 0 || K <= 0)
        return FALLBACK(M, N, K, A, sam, sak, B, sbn, sbk, C, epi, bufs, syms);
    return NAME_gemv_all(M, N, K, A, sam, sak, B, sbn, sbk, C, epi, bufs, syms, (double)LM_GEMV_PAR_MACS);
}
"""


def gemv_source(dtype: str, name: str, fallback: str) -> str:
    """C source of ``static int NAME(M, N, K, A, sam, sak, B, sbn, sbk, C, epi, bufs, syms)`` (the semantics of
    ``lm_gemm_f32``) for matrix-vector products: M == 1 or N == 1 read straight from the operands (any strides),
    the output split over the threads from ``LM_GEMV_PAR_MACS`` (2^18) multiply-adds on, the epilogue on each
    thread's part; other shapes (and K == 0) call ``fallback`` (rendered before this text). Measured on the Xeon,
    1 x 768 x 3072 with an N x K weight: 3.3x faster than OpenBLAS's ``sgemm`` (memory-bound, ~28 GB/s per core
    from L3, ~15 from DRAM)."""
    for n in (name, fallback):
        if not re.fullmatch(r"[A-Za-z_]\w*", n):
            raise ValueError(f"not a C identifier: {n!r}")
    _width(dtype)
    ctype = "float" if dtype == "float32" else "double"
    src = "#ifndef LM_GEMV_PAR_MACS\n#define LM_GEMV_PAR_MACS (1LL << 18)\n#endif\n" + _GEMV
    subs = {"VB": str(vector_bytes()), "T": ctype, "FALLBACK": fallback}
    src = re.sub(r"\b(VB|T|FALLBACK)\b", lambda m: subs[m.group(1)], src)
    return re.sub(r"\bNAME", name, src)


_AUTO = r"""
/* lm_gemm_auto_SHORT: per call, matrix-vector products, small-M products with both operands contiguous along K and
   larger-M products with A contiguous along K or M and B along N or K on luminal's kernels, the rest on lm_gemm_SHORT
   (OpenBLAS) (luminal.codegen.gemm_small) */
#ifndef LM_AUTO_SMALL_M
#define LM_AUTO_SMALL_M SMALLM
#endif
static int lm_gemm_auto_SHORT(long long M, long long N, long long K, const T *A, long long sam, long long sak,
                              const T *B, long long sbn, long long sbk, T *C, lm_epilogue epi, void **bufs,
                              const long long *syms) {
    if ((M == 1 || N == 1) && K > 0)
        return GEMV(M, N, K, A, sam, sak, B, sbn, sbk, C, epi, bufs, syms);
    if (M <= LM_AUTO_SMALL_M && N >= DOT_N && sak == 1 && sbk == 1 && (K >= DOT_K || (M <= TINY_M && K >= TINY_K)))
        return DOT(M, N, K, A, sam, sak, B, sbn, sbk, C, epi, bufs, syms);
    if (STREAM_ON && K > 0 && (sak == 1 || sam == 1) && (sbn == 1 || (STREAM_NK && sbk == 1))
        && (M >= STREAM_M ? N >= (M >= STREAM_FULL_M ? STREAM_MIN_N : STREAM_FEW_N)
                          : M >= STREAM_FEW_M && N > STREAM_N && (double)M * (double)N * (double)K >= STREAM_MACS))
        return STREAM(M, N, K, A, sam, sak, B, sbn, sbk, C, epi, bufs, syms);
    return lm_gemm_SHORT(M, N, K, A, sam, sak, B, sbn, sbk, C, epi, bufs, syms);
}
"""


def auto_source(dtype: str, with_dot: bool = True, with_stream: bool = True) -> str:
    """C source of ``lm_gemm_auto_f32`` / ``_f64`` for ``dtype`` with the GEMV, dot-product and streaming kernels
    it calls (:func:`auto_parts`; ``lm_gemm_*`` comes from :func:`luminal.codegen.c_support.gemm_helpers`),
    leaving the dot (streaming) kernel out when ``with_dot`` (``with_stream``) is false (rendered already in the
    same translation unit, e.g. as a search candidate). No packing GEMM is rendered: compiling one costs a program
    about a second."""
    from .gemm_stream import stream_source

    if dtype not in ("float32", "float64"):
        raise ValueError(f"auto GEMM supports float32 and float64, not {dtype!r}")
    names = auto_parts(dtype)
    short, ctype = ("f32", "float") if dtype == "float32" else ("f64", "double")
    parts = [gemv_source(dtype, names["gemv"], names["blas"])]
    if with_dot:
        parts.append(dot_source(dtype, names["dot"], names["blas"]))
    if with_stream:
        parts.append(stream_source(dtype, names["stream"], names["blas"]))
    subs = {"SMALLM": AUTO_SMALL_M, "DOT_N": AUTO_DOT_N, "DOT_K": AUTO_DOT_K, "TINY_M": AUTO_TINY_M,
            "TINY_K": AUTO_TINY_K, "STREAM_ON": int(stream_enabled()),  # (off: never called; still rendered)
            "STREAM_NK": int(stream_nk_enabled()),
            "STREAM_M": AUTO_STREAM_M, "STREAM_FULL_M": AUTO_STREAM_FULL_M, "STREAM_MIN_N": AUTO_STREAM_MIN_N,
            "STREAM_FEW_N": AUTO_STREAM_FEW_N, "STREAM_FEW_M": AUTO_STREAM_FEW_M, "STREAM_N": AUTO_STREAM_N,
            "STREAM_MACS": AUTO_STREAM_MACS, "GEMV": names["gemv"], "DOT": names["dot"], "STREAM": names["stream"],
            "T": ctype}
    parts.append(re.sub(r"\b(" + "|".join(subs) + r")\b", lambda m: str(subs[m.group(1)]),
                        _AUTO.replace("SHORT", short)))
    return "\n\n".join(parts)
