"""GEMMs whose operands are stored as bfloat16 or float16, read without a float32 copy.

A bfloat16 / float16 matmul is a float32 GEMM over the operands converted to float32, rounded once at the end
(``luminal.hl_ops.matmul``, PyTorch's CPU semantics). Lowered as it is written, every call first writes a
float32 copy of each operand: for a bfloat16 weight that is 2 bytes read, 4 written and 4 read again per
parameter where 2 would do, and token-by-token decoding is memory-bound (a 1 x 4096 x 4096 bfloat16 matvec: 5.2
ms with the copy, against 1.5 ms for the same product stored as float32).

* :func:`narrow_operands` rewrites the lowered program: a GEMM operand whose buffer is only a float32 conversion
  of a bfloat16 / float16 buffer (an elementwise kernel ``Cast(float32)`` reading that buffer row-major whole,
  read by float32 GEMMs only) is read from the stored buffer itself, and the conversion kernel is dropped.
* :func:`lowp_source` renders ``lm_gemm_lp_<a><b>`` (the signature of ``lm_gemm_f32`` with the stored operand
  types), dispatching per call like ``"auto"`` (:mod:`luminal.codegen.gemm_small`): matrix-vector products read
  the stored matrix and convert it in the registers; small M with both operands contiguous along K runs the
  dot-product kernel, which converts while it copies its blocks; everything else converts the stored operands
  into a per-thread float32 scratch in their own layout and calls ``lm_gemm_f32`` (OpenBLAS).

These GEMMs are not part of the measured search (their implementation is this dispatch). The CPU backend only:
the GPU backend's GEMMs read their operands through views and convert in ``tl.dot``'s prologue anyway.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from .. import ops
from ..dtype import DType
from .gemm import _COMMON
from .gemm_amx import amx_name, amx_source
from .gemm_config import _width, vector_bytes
from .kernel import Compute, ConstValue, ElementwiseKernel, GatherValue, GemmKernel, Load, Program, Remapped
from .values import buffer_uses, kernel_buffers, walk

LOWP = (DType.bfloat16, DType.float16)
# storage of a GEMM operand -> its C element type; "bf16r" is a float32 buffer read rounded to bfloat16
STORE_TYPES = {"float32": "float", "float64": "double", "bfloat16": "unsigned short", "float16": "_Float16",
               "bf16r": "float"}
_SHORT = {"float32": "f", "bfloat16": "b", "float16": "h", "bf16r": "r"}


def convert_expr(store: str, expr: str) -> str:
    """C expression converting the stored element ``expr`` of type ``store`` to float."""
    return f"lm_cv_{store}({expr})"


def convert_loop(store: str, dst: str, src: str, n: str) -> str:
    """C statements converting ``n`` stored elements at ``src`` (type ``store``) to floats at ``dst``: whole
    vectors with :func:`lowp_source`'s ``lm_lp_load_*`` (rendered before), then the tail one by one."""
    load = f"lm_lp_load_{_SHORT[store]}"
    return (f"{{ long long k = 0; for (; k + VB / 4 <= {n}; k += VB / 4) {{ lm_lp_v v = {load}({src} + k); "
            f"memcpy({dst} + k, &v, VB); }} for (; k < {n}; k++) {dst}[k] = {convert_expr(store, f'{src}[k]')}; }}")


def operand_stores(program: Program, kernel: GemmKernel) -> tuple[str, str] | None:
    """``(a, b)`` storage dtype names of a float32 GEMM's operands when one of them is bfloat16 / float16 (see
    :func:`narrow_operands`), else None."""
    if kernel.dtype != DType.float32 or kernel.a is None or kernel.b is None:
        return None
    stores = tuple("bf16r" if rnd is not None else program.buffers[x][1].value
                   for x, rnd in ((kernel.a, kernel.a_round), (kernel.b, kernel.b_round)))
    if stores == ("float32", "float32"):
        return None
    return stores


def _cast_of(value):
    """The argument of a single-argument ``Cast`` value, or None."""
    if isinstance(value, Compute) and isinstance(value.op, ops.Cast) and len(value.args) == 1:
        return value.args[0]
    return None


def _conversion_source(kernel) -> tuple[int, bool] | None:
    """``(buffer, rounded)`` when an elementwise kernel only converts a buffer to float32, whole and row-major:
    a bfloat16 / float16 buffer widened (``rounded`` False), or a float32 buffer rounded to bfloat16 and widened
    back (``rounded`` True: autocast's GEMM operands); else None."""
    if not isinstance(kernel, ElementwiseKernel) or kernel.dtype != DType.float32:
        return None
    load, rounded = _cast_of(kernel.value), False
    inner = _cast_of(load) if load is not None and load.dtype == DType.bfloat16 else None
    if inner is not None:
        load, rounded = inner, True
    if not isinstance(load, Load) or load.dtype != (DType.float32 if rounded else load.dtype) or \
            (not rounded and load.dtype not in LOWP):
        return None
    view = load.view
    if not view.is_contiguous() or tuple(view.dims) != tuple(kernel.dims):
        return None
    return load.buffer, rounded


def _bfloat16_valued(program: Program) -> set:
    """float32 buffers whose every element is a bfloat16 value (its float32 widening): written by an elementwise
    kernel whose value is a ``Cast(float32)`` of a bfloat16 value, or that copies such a buffer through a view
    (an im2col matrix of autocast's rounded activations, a transposed gradient; padding reads 0, a bfloat16
    value too). Storing one as bfloat16 loses nothing (``lm_f32_to_bf16`` keeps a bfloat16 value's bits, NaN
    payloads included)."""
    out: set = set()
    for k in program.kernels:
        if not isinstance(k, ElementwiseKernel) or k.dtype != DType.float32:
            continue
        inner = _cast_of(k.value)
        if (inner is not None and inner.dtype == DType.bfloat16) or \
                (isinstance(k.value, Load) and k.value.buffer in out and k.value.dtype == DType.float32) or \
                (isinstance(k.value, ConstValue) and _bfloat16_constant(k.value.value)):
            out.add(k.out)
    return out


def _bfloat16_constant(value) -> bool:
    """Whether a float32 constant is a bfloat16 value (the low 16 bits of its float32 bits are 0): the gradient
    of a mean over a power-of-two count, a rounding folded into a constant."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    f = np.float32(value)
    return float(f) == value and int(f.view(np.uint32)) & 0xFFFF == 0


def _low_value(kernel, store_as: tuple, exact: set):
    """The low-precision value an elementwise float32 kernel may store instead (its value is a float32
    conversion of one, or every element is a bfloat16 value already), or None."""
    if not isinstance(kernel, ElementwiseKernel) or kernel.dtype != DType.float32:
        return None
    inner = _cast_of(kernel.value)
    if inner is not None and inner.dtype in store_as:
        return inner
    if kernel.out in exact:  # every value is a bfloat16 value already: stored as one, exactly
        return Compute(ops.Cast(DType.bfloat16), (kernel.value,), DType.bfloat16)
    return None


def _raw_gather(kernel, buf: int) -> bool:
    """Whether ``kernel`` gathers from ``buf`` directly (not through a ``Load`` that could be widened)."""
    return any(isinstance(v, GatherValue) and v.data is None and v.data_buffer == buf for v in walk(kernel.value))


def _widen_loads(value, low: dict, memo: dict):
    """``value`` with each float32 ``Load`` of a buffer now stored as ``low[buffer]`` read as that type and
    widened to float32 (exact); shared subtrees stay shared."""
    key = id(value)
    if key in memo:
        return memo[key]
    out = value
    if isinstance(value, Load):
        if value.buffer in low and value.dtype == DType.float32:
            out = Compute(ops.Cast(DType.float32), (Load(value.buffer, value.view, low[value.buffer]),),
                          DType.float32)
    elif isinstance(value, Compute):
        args = tuple(_widen_loads(a, low, memo) for a in value.args)
        if any(a is not b for a, b in zip(args, value.args)):
            out = Compute(value.op, args, value.dtype)
    elif isinstance(value, Remapped):
        inner = _widen_loads(value.value, low, memo)
        if inner is not value.value:
            out = dataclasses.replace(value, value=inner)
    elif isinstance(value, GatherValue):
        data = None if value.data is None else _widen_loads(value.data, low, memo)
        index = _widen_loads(value.index, low, memo)
        if data is not value.data or index is not value.index:
            out = dataclasses.replace(value, data=data, index=index)
    memo[key] = out
    return out


def direct_gemms(program: Program, writers: dict) -> set[int]:
    """Indices of the float32 GEMMs of ``program`` that read a *window copy* (a convolution's im2col matrix, under
    autocast the copy of a rounded input) which the direct convolution (:mod:`.gemm_direct`) can read in place:
    :func:`narrow_operands` leaves their operands as they are (a window copy stored as bfloat16, or an operand read
    rounded, would keep them from prologue fusion and the direct kernel)."""
    from .gemm_direct import direct_plan, window_load
    from .gemm_prologue import Prologue, split_axes

    out = set()
    for i, g in enumerate(program.kernels):
        if not isinstance(g, GemmKernel) or g.dtype != DType.float32 or g.a_pro is not None or g.b_pro is not None:
            continue
        for side in ("a", "b"):
            w = writers.get(getattr(g, side))
            kernel = program.kernels[w] if w is not None else None
            if not isinstance(kernel, ElementwiseKernel) or w > i:
                continue
            view = getattr(g, side + "_view")
            pro = Prologue(kernel, view, side, split_axes(kernel.dims, view, side))
            if pro.axes is not None and window_load(pro) is not None and direct_plan(
                    program, dataclasses.replace(g, **{side: None, side + "_pro": pro})) is not None:
                out.add(i)
    return out


def _plan(program, writers, readers, pinned, exact, direct, store_as, round_on_load, widen_readers):
    """``(drop, narrow, widen)`` of :func:`narrow_operands` (the GEMMs in ``direct`` left alone)."""
    drop: dict[int, tuple[int, bool]] = {}  # converted buffer -> (stored buffer, read rounded to bfloat16)
    narrow: dict[int, object] = {}  # buffer -> the bfloat16 value its kernel stores instead
    widen: dict[int, DType] = {}  # narrowed buffer -> its low type, read by other kernels too (widened there)
    for buf, w in writers.items():
        kernel = program.kernels[w]
        if buf in pinned or not readers.get(buf):
            continue
        gemm = [isinstance(g, GemmKernel) and g.dtype == DType.float32 and r > w and g.a_pro is None
                and g.b_pro is None and r not in direct for r in readers[buf] for g in [program.kernels[r]]]
        if not all(gemm):
            value = _low_value(kernel, store_as, exact)
            if widen_readers and any(gemm) and value is not None and all(
                    ok or (not isinstance(program.kernels[r], GemmKernel) and r > w and
                           not _raw_gather(program.kernels[r], buf)) for ok, r in zip(gemm, readers[buf])):
                narrow[buf] = value
                widen[buf] = value.dtype
            continue
        src = _conversion_source(kernel)
        if src is not None and (round_on_load or not src[1]):
            drop[buf] = src
        else:
            value = _low_value(kernel, store_as, exact)
            if value is not None:
                narrow[buf] = value
    return drop, narrow, widen


def narrow_operands(program: Program, store_as: tuple = (DType.bfloat16,), round_on_load: bool = True,
                    widen_readers: bool = False) -> Program:
    """``program`` with the float32 conversions that only GEMMs read removed (see the module docstring); returns
    ``program`` itself when nothing changes. A buffer written by an elementwise kernel and read only as float32
    GEMM operands is

    * dropped when the kernel only widens a bfloat16 / float16 buffer (the GEMMs read that buffer), or only
      rounds a float32 buffer to bfloat16 (the GEMMs read the float32 buffer and round it: ``a_round`` /
      ``b_round``, autocast's operands);
    * stored as bfloat16 when the kernel computes something and rounds it to bfloat16 last (autocast's rounding
      fused into the producer, e.g. a layer norm), or copies such a buffer (:func:`_bfloat16_valued`: the
      im2col matrix of a convolution under autocast), or writes a constant that is a bfloat16 value (a mean's
      gradient ``1 / N`` for a power-of-two ``N``, autocast's rounding folded into it): half the bytes, and the
      GEMMs read it as bfloat16.
      ``store_as``: the types a computed operand may be stored as (the GPU backend adds float16: float16
      autocast's operands then reach tensor cores). ``round_on_load=False`` (the GPU backend) keeps the
      rounding of a float32 buffer as a kernel that stores the bfloat16 values: a tensor-core GEMM then loads
      half the bytes and converts nothing in its inner loop. ``widen_readers`` (both backends): a GEMM
      operand that other kernels read too (autocast's output gradient, also summed into the bias gradient) is
      stored in the low type as well, and those kernels widen it as they load it (exact: its values are
      low-precision values), so every GEMM of an autocast training step reaches the tensor cores (GPU) or
      multiplies bfloat16 operands once (CPU: a float32 operand is split into three bfloat16 parts, three
      products; on Zen 4 without AMX, W3 under autocast 5.1 -> 4.3 ms, W5 22.1 -> 18.9 ms).
    """
    writers, readers, pinned = buffer_uses(program)
    exact = _bfloat16_valued(program)
    drop, narrow, widen = _plan(program, writers, readers, pinned, exact, set(), store_as, round_on_load,
                                widen_readers)
    if (drop or narrow) and round_on_load:  # (GEMMs the direct convolution takes keep their operands)
        direct = direct_gemms(program, writers)
        if direct:
            drop, narrow, widen = _plan(program, writers, readers, pinned, exact, direct, store_as, round_on_load,
                                        widen_readers)
    if not drop and not narrow:
        return program
    kernels = []
    for k in program.kernels:
        if k.out in drop:
            continue
        reads_widened = widen and not isinstance(k, GemmKernel) and kernel_buffers(k) & set(widen)
        if k.out in narrow:  # (its low value was made from the unwidened one: widen that too)
            value = _widen_loads(narrow[k.out], widen, {}) if reads_widened else narrow[k.out]
            k = dataclasses.replace(k, value=value, dtype=value.dtype)
        elif reads_widened:
            k = dataclasses.replace(k, value=_widen_loads(k.value, widen, {}))
        if isinstance(k, GemmKernel) and (k.a in drop or k.b in drop):
            change = {}
            for side in ("a", "b"):
                if getattr(k, side) in drop:
                    buf, rounded = drop[getattr(k, side)]
                    change[side] = buf
                    change[side + "_round"] = DType.bfloat16 if rounded else None
            k = dataclasses.replace(k, **change)
        kernels.append(k)
    buffers = {b: ((v[0], narrow[b].dtype) if b in narrow else v) for b, v in program.buffers.items() if b not in drop}
    return Program(kernels, buffers, list(program.inputs), list(program.outputs), dict(program.aliases))


def lowp_name(a_store: str, b_store: str) -> str:
    """The C name of the GEMM with operands stored as ``a_store`` / ``b_store`` (float32 compute)."""
    return f"lm_gemm_lp_{_SHORT[a_store]}{_SHORT[b_store]}"


_CONVERT = r"""
#ifndef LM_LOWP_COMMON
#define LM_LOWP_COMMON
static inline float lm_cv_float32(float x) { return x; }
static inline float lm_cv_bfloat16(unsigned short x) { return lm_bf16_to_f32(x); }
static inline float lm_cv_float16(_Float16 x) { return (float)x; }
static inline float lm_cv_bf16r(float x) { return lm_bf16r(x); }
/* per-thread scratch, grown on demand, never freed: 0 and 1 A and B converted to float32 (or the AMX kernel's
   packed A and row buffer), 2 and 3 the AMX row kernel's packed B and bfloat16 copy of A */
__attribute__((weak, visibility("hidden"))) __thread void *lm_lp_buf[4];
__attribute__((weak, visibility("hidden"))) __thread size_t lm_lp_cap[4];
__attribute__((weak, visibility("hidden"))) void lm_release_lp(void) {
    for (int k = 0; k < 4; k++) { free(lm_lp_buf[k]); lm_lp_buf[k] = NULL; lm_lp_cap[k] = 0; }
}
typedef float lm_lp_v __attribute__((vector_size(VB)));
#endif
"""

_STORED = r"""
#ifndef LM_LP_STORED_SHORT
#define LM_LP_STORED_SHORT
#include <immintrin.h>
typedef STYPE lm_lp_SHORT_h __attribute__((vector_size(VB / 2)));
/* W consecutive stored elements at p as a float vector */
static inline lm_lp_v lm_lp_load_SHORT(const STYPE *p) {
    lm_lp_SHORT_h h;
    memcpy(&h, p, VB / 2);
LOADV
}
/* out[i] = sum_k X[i*sxi + k*sxk] * y[k] for i in [i0, i1), X stored as STYPE, y float32 contiguous */
static void lm_lp_rows_SHORT(long long i0, long long i1, long long K, const STYPE *X, long long sxi, long long sxk,
                             const float *y, float *restrict out) {
    enum { W = VB / 4 };
    if (sxk == 1) {  /* rows contiguous along K: four rows at a time, converted in the registers */
        long long i = i0;
        for (; i + 4 <= i1; i += 4) {
            const STYPE *x0 = X + i * sxi, *x1 = x0 + sxi, *x2 = x1 + sxi, *x3 = x2 + sxi;
            lm_lp_v a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
            long long k = 0;
            for (; k + 2 * W <= K; k += 2 * W) {  /* two vectors per row: eight independent sums */
                lm_lp_v v, u;
                memcpy(&v, y + k, VB); memcpy(&u, y + k + W, VB);
                a0 += lm_lp_load_SHORT(x0 + k) * v; b0 += lm_lp_load_SHORT(x0 + k + W) * u;
                a1 += lm_lp_load_SHORT(x1 + k) * v; b1 += lm_lp_load_SHORT(x1 + k + W) * u;
                a2 += lm_lp_load_SHORT(x2 + k) * v; b2 += lm_lp_load_SHORT(x2 + k + W) * u;
                a3 += lm_lp_load_SHORT(x3 + k) * v; b3 += lm_lp_load_SHORT(x3 + k + W) * u;
            }
            for (; k + W <= K; k += W) {
                lm_lp_v v;
                memcpy(&v, y + k, VB);
                a0 += lm_lp_load_SHORT(x0 + k) * v; a1 += lm_lp_load_SHORT(x1 + k) * v;
                a2 += lm_lp_load_SHORT(x2 + k) * v; a3 += lm_lp_load_SHORT(x3 + k) * v;
            }
            a0 += b0; a1 += b1; a2 += b2; a3 += b3;
            float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (int j = 0; j < W; j++) { s0 += a0[j]; s1 += a1[j]; s2 += a2[j]; s3 += a3[j]; }
            for (; k < K; k++) {
                s0 += lm_cv_STORE(x0[k]) * y[k]; s1 += lm_cv_STORE(x1[k]) * y[k];
                s2 += lm_cv_STORE(x2[k]) * y[k]; s3 += lm_cv_STORE(x3[k]) * y[k];
            }
            out[i] = s0; out[i + 1] = s1; out[i + 2] = s2; out[i + 3] = s3;
        }
        for (; i < i1; i++) {
            const STYPE *x = X + i * sxi;
            float acc = 0;
            for (long long k = 0; k < K; k++) acc += lm_cv_STORE(x[k]) * y[k];
            out[i] = acc;
        }
    } else if (sxi == 1) {  /* out += y[k] * (row k of X), over blocks of out that stay in L1 */
        for (long long b0 = i0; b0 < i1; b0 += 2048) {
            long long b1 = b0 + 2048 < i1 ? b0 + 2048 : i1, k = 0;
            for (long long i = b0; i < b1; i++) out[i] = 0;
            for (; k + 2 <= K; k += 2) {
                float y0 = y[k], y1 = y[k + 1];
                const STYPE *x0 = X + k * sxk, *x1 = x0 + sxk;
                long long i = b0;
                for (; i + W <= b1; i += W) {
                    lm_lp_v o;
                    memcpy(&o, out + i, VB);
                    o += lm_lp_load_SHORT(x0 + i) * y0 + lm_lp_load_SHORT(x1 + i) * y1;
                    memcpy(out + i, &o, VB);
                }
                for (; i < b1; i++) out[i] += y0 * lm_cv_STORE(x0[i]) + y1 * lm_cv_STORE(x1[i]);
            }
            for (; k < K; k++) {
                float y0 = y[k]; const STYPE *x0 = X + k * sxk;
                for (long long i = b0; i < b1; i++) out[i] += y0 * lm_cv_STORE(x0[i]);
            }
        }
    } else {
        for (long long i = i0; i < i1; i++) {
            float acc = 0;
            for (long long k = 0; k < K; k++) acc += lm_cv_STORE(X[i * sxi + k * sxk]) * y[k];
            out[i] = acc;
        }
    }
}
#endif
"""

_CONV = r"""
/* rows x K of an operand (element (r, k) at src[r*sr + k*sk]) as float32 in the calling thread's scratch `which`,
   in the operand's own layout (K-contiguous rows, or rows-contiguous columns); *sr2 / *sk2 get its strides */
static float *NAME_conv_SIDE(int which, long long rows, long long K, const TS *src, long long sr, long long sk,
                          long long *sr2, long long *sk2) {
    float *d = (float *)lm_og_grow(&lm_lp_buf[which], &lm_lp_cap[which], (size_t)(rows * K) * sizeof(float));
    if (!d) return NULL;
    if (sr == 1 && sk != 1) {
        for (long long k = 0; k < K; k++) for (long long r = 0; r < rows; r++) d[k * rows + r] = lm_cv_STORE(src[k * sk + r]);
        *sr2 = 1; *sk2 = rows;
    } else {
        for (long long r = 0; r < rows; r++) for (long long k = 0; k < K; k++) d[r * K + k] = lm_cv_STORE(src[r * sr + k * sk]);
        *sr2 = K; *sk2 = 1;
    }
    return d;
}
"""

_DISPATCH = r"""
/* NAME: C = A . B^T (lm_gemm_f32's semantics) with A stored as TA and B as TB (luminal.codegen.gemm_lowp) */
static int NAME(long long M, long long N, long long K, const TA *A, long long sam, long long sak,
                const TB *B, long long sbn, long long sbk, float *C, lm_epilogue epi, void **bufs,
                const long long *syms) {
    if (M <= 0 || N <= 0) return 0;
    if (K > 0 && (M == 1 || N == 1)) {  /* matrix-vector: the vector in float32 scratch, the matrix read stored */
        int rows = N == 1;
        long long len = rows ? M : N, sy = rows ? sbk : sak, s1, s2;
        float *y = rows ? NAME_conv_b(1, 1, K, B, 0, sy, &s1, &s2) : NAME_conv_a(1, 1, K, A, 0, sy, &s1, &s2);
        if (!y) return -1;
        int err = 0;
        #pragma omp parallel if(!omp_in_parallel() && (double)M * (double)N * (double)K >= (double)LM_GEMV_PAR_MACS)
        {
            long long nt = omp_get_num_threads(), t = omp_get_thread_num();
            long long per = ((len + nt - 1) / nt + 15) / 16 * 16;
            long long lo = t * per < len ? t * per : len, hi = lo + per < len ? lo + per : len;
            if (hi > lo) {
                if (rows) ROWS_A(lo, hi, K, A, sam, sak, y, C);
                else ROWS_B(lo, hi, K, B, sbn, sbk, y, C);
                int e = !epi ? 0 : rows ? epi(bufs, syms, lo, hi, 0, 1) : epi(bufs, syms, 0, 1, lo, hi);
                if (e) {
                    #pragma omp critical(lm_own_gemm_err)
                    { if (!err) err = e; }
                }
            }
        }
        return err;
    }
AMX_CALL    if (M <= LM_AUTO_SMALL_M && N >= 48 && sak == 1 && sbk == 1 && (K >= 256 || (M <= 16 && K >= 128)))
        return NAME_dot(M, N, K, A, sam, sak, B, sbn, sbk, C, epi, bufs, syms);
    return NAME_convert(M, N, K, A, sam, sak, B, sbn, sbk, C, epi, bufs, syms);
}
"""

_CONVERT_CALL = r"""
/* NAME_convert: the stored operands converted to float32 scratch, then lm_gemm_f32 */
static int NAME_convert(long long M, long long N, long long K, const TA *A, long long sam, long long sak,
                        const TB *B, long long sbn, long long sbk, float *C, lm_epilogue epi, void **bufs,
                        const long long *syms) {
    if (K <= 0) return lm_gemm_f32(M, N, K, NULL, 0, 0, NULL, 0, 0, C, epi, bufs, syms);
    long long a1 = sam, a2 = sak, b1 = sbn, b2 = sbk;
    const float *a = CONVERT_A, *b = CONVERT_B;
    if (!a || !b) return -1;
    return lm_gemm_f32(M, N, K, a, a1, a2, b, b1, b2, C, epi, bufs, syms);
}
"""


def _vector_load(avx512: str, avx2: str, avx2_macro: str, generic: str) -> str:
    """The body of ``lm_lp_load_*``: the AVX-512 or AVX2 intrinsic expression where the build targets it, else
    ``generic`` statements (vector extensions)."""
    out = []
    for cond, expr in (("VB == 64 && defined(__AVX512F__)", avx512), (f"VB == 32 && defined({avx2_macro})", avx2)):
        out += [f"#{'if' if not out else 'elif'} {cond}", f"    __typeof__({expr}) f = {expr};",
                "    lm_lp_v r;", "    memcpy(&r, &f, VB);", "    return r;"]
    return "\n".join(out + ["#else", "    " + generic, "#endif"])


def lowp_source(a_store: str, b_store: str) -> str:
    """C source of :func:`lowp_name` ``(a_store, b_store)`` and the kernels it calls (see the module docstring);
    expects ``HELPERS`` and ``gemm_helpers()`` (``lm_gemm_f32``) before it."""
    from .gemm_small import AUTO_SMALL_M, dot_source

    for s in (a_store, b_store):
        if s not in _SHORT:
            raise ValueError(f"stored GEMM operand type must be float32, bfloat16, float16 or bf16r (float32 "
                             f"rounded to bfloat16), not {s!r}")
    if a_store == b_store == "float32":
        raise ValueError("lowp_source: one operand must be stored as bfloat16 or float16")
    _width("float32")
    name = lowp_name(a_store, b_store)
    vb = vector_bytes()
    parts = [_COMMON, "#ifndef LM_GEMV_PAR_MACS\n#define LM_GEMV_PAR_MACS (1LL << 18)\n#endif\n"
             f"#ifndef LM_AUTO_SMALL_M\n#define LM_AUTO_SMALL_M {AUTO_SMALL_M}\n#endif", _CONVERT.replace("VB", str(vb))]
    for store in sorted({a_store, b_store}):
        if store == "bfloat16":
            # (gcc 12 widens a generic 16-half vector as two 8-lane halves plus shuffles, and scalarizes float16
            # conversions: one vpmovzxwd / vcvtph2ps per vector where the instruction set has it)
            load = _vector_load("_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)h), 16))",
                                "_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32((__m128i)h), 16))",
                                "__AVX2__", "typedef unsigned int u32v __attribute__((vector_size(VB)));\n"
                                "    u32v w = __builtin_convertvector(h, u32v) << 16;\n"
                                "    lm_lp_v f;\n    memcpy(&f, &w, VB);\n    return f;")
        elif store == "float16":
            load = _vector_load("_mm512_cvtph_ps((__m256i)h)", "_mm256_cvtph_ps((__m128i)h)", "__F16C__",
                                "return __builtin_convertvector(h, lm_lp_v);")
        elif store == "bf16r":  # float32 rounded to bfloat16 (lm_bf16r on whole vectors)
            load = ("    typedef unsigned int u32v __attribute__((vector_size(VB)));\n    (void)h;\n"
                    "    u32v u, r;\n    memcpy(&u, p, VB);\n"
                    "    r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;\n"
                    "    u32v nan = (u32v)((u & 0x7fffffffu) > 0x7f800000u);\n"
                    "    r = (r & ~nan) | (((u & 0x80000000u) | 0x7fc00000u) & nan);\n"
                    "    lm_lp_v f;\n    memcpy(&f, &r, VB);\n    return f;")
        else:
            load = "    lm_lp_v f;\n    memcpy(&f, p, VB);\n    (void)h;\n    return f;"
        text = _STORED.replace("LOADV", load).replace("SHORT", _SHORT[store]).replace("STYPE", STORE_TYPES[store])
        parts.append(text.replace("lm_cv_STORE", f"lm_cv_{store}").replace("VB", str(vb)))
    convs = "".join(_CONV.replace("SIDE", side).replace("TS", STORE_TYPES[store]).replace("STORE", store)
                    for side, store in (("a", a_store), ("b", b_store)))
    convert = _CONVERT_CALL.replace("CONVERT_A", "A" if a_store == "float32" else
                                    "NAME_conv_a(0, M, K, A, sam, sak, &a1, &a2)")
    convert = convert.replace("CONVERT_B", "B" if b_store == "float32" else "NAME_conv_b(1, N, K, B, sbn, sbk, &b1, &b2)")
    subs = {"TA": STORE_TYPES[a_store], "TB": STORE_TYPES[b_store],
            "ROWS_A": f"lm_lp_rows_{_SHORT[a_store]}", "ROWS_B": f"lm_lp_rows_{_SHORT[b_store]}"}
    parts.append(re.sub(r"\b(TA|TB)\b", lambda m: subs[m.group(1)], convs + convert).replace("NAME", name))
    dot = dot_source("float32", f"{name}_dot", f"{name}_convert", a_store, b_store)
    if a_store == b_store == "bfloat16" and vb == 64:  # AVX512-BF16 where the compiler targets it
        pairs = dot_source("float32", f"{name}_dot", f"{name}_convert", a_store, b_store, bf16_pairs=True)
        dot = f"#if defined(__AVX512BF16__)\n#include <immintrin.h>\n{pairs}\n#else\n{dot}\n#endif"
    parts.append(dot)
    amx_call = ""
    if b_store in ("bfloat16", "bf16r") and a_store in ("bfloat16", "float32", "bf16r"):  # AMX where built
        parts.append(amx_source(a_store, b_store))
        amx_call = ("#ifdef LM_HAVE_AMX\n    if (M >= 2 && K > 0) {\n"
                    f"        int r = {amx_name(a_store, b_store)}(M, N, K, A, sam, sak, B, sbn, sbk, C, epi, bufs, syms);\n"
                    "        if (r != LM_AMX_UNUSABLE) return r;\n    }\n#endif\n")
    dispatch = re.sub(r"\b(TA|TB|ROWS_A|ROWS_B)\b", lambda m: subs[m.group(1)], _DISPATCH.replace("AMX_CALL", amx_call))
    parts.append(dispatch.replace("NAME", name))
    return "\n".join(parts)
