"""Direct convolution: a GEMM whose B operand is a window view of one buffer, computed without packing B.

A convolution lowers to a GEMM ``C[m, n] = sum_k A[m, k] * B[k, n]`` whose B is the input seen through its
windows (``k`` = input channel and kernel offset, ``n`` = output position): the im2col matrix, 27 times the
input for a 3-D 3x3x3 kernel. Prologue fusion (:mod:`.gemm_prologue`) no longer stores it, but still packs it,
element by element through the padding masks, and with few output channels (a 16-channel Conv3d: M = 16) each
packed element feeds only 16 multiply-adds, so the pack costs about as much as the products (88 GFLOP/s against
~200 for the microkernel alone).

The direct kernel reads B in place. Every element of B is ``X[koff[k] + noff[n]]`` in a *zero-padded copy*
``X'`` of the input (the masks of the view become a halo of zeros around the axes they bound): the offset splits
into a part of ``k`` (a table of K entries) and a part of ``n``, and along the output's innermost axis (unit
stride in ``X'``) consecutive ``n`` read consecutive elements. So the kernel takes vectors of ``n`` along that
axis (``NV`` of them, from different rows of the output), and for each ``k`` loads one vector per row from
``X' + noff + koff[k]`` and multiply-adds it into ``MR`` rows of accumulators, the ``A`` values broadcast from an
``MR``-interleaved copy of A. No masks, no packing of B; the copy ``X'`` is the input's size plus its halo.

:func:`direct_plan` decides whether a GEMM qualifies and how its view maps onto the input's axes: one
unbatched GEMM whose operand A is read as it is and whose B is a fused prologue that is a plain load
(:func:`plain_load`) of a buffer of the GEMM's dtype, each index variable moving along one
axis of that buffer (a positive step), each mask bounding one such axis by its extent, and the output's innermost
axis reading ``X'`` at unit stride and at least half a vector long (stride-1 convolutions of any padding, dilation
and dimension; a strided convolution, or a weight gradient whose output runs along the kernel's width, keeps the
pack). The mapping is rebuilt from the parts and compared with the view, term by term,
before it is used. :func:`render_direct` writes the C function, with the fused own GEMM's signature (so the
renderer calls it the same way). ``LUMINAL_DIRECT_CONV=0`` turns the path off.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..dtype import DType
from ..shape import to_expr
from .gemm_config import _registers, vector_bytes
from .kernel import GemmKernel, Load, Program

MAX_PADDED = 1 << 26  # elements: a larger padded copy keeps the pack


@dataclass(frozen=True)
class DirectPlan:
    """How a fused B operand reads its buffer: ``src`` (buffer id) of ``dims``, padded by ``pads[a] = (lo, hi)``
    per axis; ``steps[d] = (axis, step)`` for each index variable ``d`` of the prologue that moves (its kernel
    axis longer than 1, its stride non-zero); ``origin[a]``: the coordinate on axis ``a`` when every variable is
    0 (before padding). ``q``: the prologue axis of the output's innermost index (unit stride in the copy)."""
    src: int
    dims: tuple
    pads: tuple
    steps: dict
    origin: tuple
    q: int

    def padded_strides(self) -> list[int]:
        sizes = [d + lo + hi for d, (lo, hi) in zip(self.dims, self.pads)]
        out = [1] * len(sizes)
        for a in range(len(sizes) - 2, -1, -1):
            out[a] = out[a + 1] * sizes[a + 1]
        return out

    def padded_size(self) -> int:
        n = 1
        for d, (lo, hi) in zip(self.dims, self.pads):
            n *= d + lo + hi
        return n


def plain_load(pro) -> Load | None:
    """The :class:`~.kernel.Load` that the prologue ``pro``'s value is when it is nothing else (one buffer of the
    kernel's dtype read through a view over the kernel's axes), or None."""
    v = pro.kernel.value
    if not isinstance(v, Load) or v.dtype != pro.kernel.dtype or len(v.view.dims) != len(pro.kernel.dims):
        return None
    return v


def _int(x):
    return to_expr(x).to_int()


def direct_plan(program: Program, g: GemmKernel) -> DirectPlan | None:
    """The :class:`DirectPlan` of GEMM kernel ``g``, or None when the direct kernel cannot compute it (see the
    module docstring for the conditions)."""
    if os.environ.get("LUMINAL_DIRECT_CONV", "1") == "0":
        return None
    if g.b_pro is None or g.a_pro is not None or g.dtype not in (DType.float32, DType.float64):
        return None
    gdims = [_int(d) for d in g.dims]
    if None in gdims or any(d != 1 for d in gdims[:-2]) or _int(g.a_view.dims[-1]) is None:
        return None
    pro = g.b_pro
    load = plain_load(pro)
    entry = program.buffers.get(load.buffer) if load is not None else None
    if entry is None or entry[1] != g.dtype:
        return None
    dims = [_int(d) for d in entry[0]]
    kdims = [_int(d) for d in pro.kernel.dims]
    if None in dims or None in kdims or not dims:
        return None
    view = load.view
    strides, off = [_int(s) for s in view.strides], _int(view.offset)
    masks = [([_int(c) for c in coeffs], _int(const), _int(size)) for coeffs, const, size in view.masks]
    if None in strides or off is None or any(None in m[0] or None in m[1:] for m in masks):
        return None
    rs = [1] * len(dims)
    for a in range(len(dims) - 2, -1, -1):
        rs[a] = rs[a + 1] * dims[a + 1]
    moving = [d for d in range(len(kdims)) if kdims[d] > 1 and (strides[d] != 0 or any(m[0][d] for m in masks))]
    mask_of = {}
    for j, (coeffs, _, _) in enumerate(masks):
        for d in moving:
            if coeffs[d]:
                if d in mask_of:
                    return None
                mask_of[d] = j
    steps = {}
    for d in moving:
        s, j = strides[d], mask_of.get(d)
        if s <= 0:
            return None
        if j is not None:
            c, size = masks[j][0][d], masks[j][2]
            axes = [a for a in range(len(dims)) if dims[a] == size and c * rs[a] == s]
            step = c
        else:
            axes = [a for a in range(len(dims)) if s % rs[a] == 0 and s // rs[a] * (kdims[d] - 1) < dims[a]]
            step = s // rs[axes[0]] if axes else 0
        if not axes or step <= 0:
            return None
        steps[d] = (axes[0], step)
    # each mask bounds exactly the axis its variables move along, and every variable on that axis
    masked = {}
    for j, (coeffs, const, size) in enumerate(masks):
        on = {steps[d][0] for d in moving if coeffs[d]}
        if len(on) != 1 or any(coeffs[d] for d in range(len(kdims)) if d not in moving):
            return None
        a = on.pop()
        if a in masked or dims[a] != size or any(
                (coeffs[d] != 0) != (steps[d][0] == a) or coeffs[d] and coeffs[d] != steps[d][1] for d in moving):
            return None
        masked[a] = const
    origin, rem = [0] * len(dims), off - sum(const * rs[a] for a, const in masked.items())
    for a in range(len(dims)):
        if a in masked:
            origin[a] = masked[a]
        else:
            origin[a], rem = divmod(rem, rs[a]) if rem >= 0 else (-1, rem)
            if origin[a] < 0:
                return None
    if rem != 0:
        return None
    # rebuild the view from the parts: the same offset and strides, each coordinate in range where unmasked
    if sum(origin[a] * rs[a] for a in range(len(dims))) != off or any(
            steps[d][1] * rs[steps[d][0]] != strides[d] for d in moving):
        return None
    pads = []
    for a in range(len(dims)):
        hi = origin[a] + sum(st * (kdims[d] - 1) for d, (ax, st) in steps.items() if ax == a)
        lo_pad, hi_pad = max(0, -origin[a]), max(0, hi - (dims[a] - 1))
        if a not in masked and (lo_pad or hi_pad):
            return None
        pads.append((lo_pad, hi_pad))
    q = next((d for d, e in enumerate(pro.axes) if e is not None and e[0] == "row" and e[1] == 1), None)
    plan = DirectPlan(load.buffer, tuple(dims), tuple(pads), steps, tuple(origin), q)
    if q is None or q not in steps or steps[q][1] * plan.padded_strides()[steps[q][0]] != 1 or \
            plan.padded_size() > MAX_PADDED or 2 * kdims[q] < tile(g.dtype)[2]:
        return None  # (a run shorter than half a vector: a weight gradient's kernel-width axis, mostly idle lanes)
    return plan


def tile(dtype: DType) -> tuple[int, int, int]:
    """``(MR, NV, VW)``: rows of A, vectors of output positions and elements per vector of the register tile
    (``MR * NV`` accumulators: 8 x 3 with 32 vector registers, 4 x 3 with 16)."""
    vw = vector_bytes() // dtype.itemsize
    return (8, 3, vw) if _registers() == 32 else (4, 3, vw)


def render_direct(r, name: str, g: GemmKernel, plan: DirectPlan) -> str:
    """C of the direct kernel ``name`` for GEMM ``g`` (the signature of the fused own GEMM,
    :func:`~.gemm_prologue.fused_gemm_source`: B is the ``lm_pro_T`` record, unused here beyond its type), rendered
    through ``r`` (the :class:`~luminal.codegen.c.CRenderer`: buffer slots and pointer names)."""
    from .gemm import _COMMON

    pro = g.b_pro
    kdims = [_int(d) for d in pro.kernel.dims]
    ctype = g.dtype.c_type
    mr, nv, vw = tile(g.dtype)
    rsp = plan.padded_strides()
    sizes = [d + lo + hi for d, (lo, hi) in zip(plan.dims, plan.pads)]
    base = sum(rsp[a] * (plan.origin[a] + plan.pads[a][0]) for a in range(len(sizes)))

    def part(role):
        terms = []
        for d, (a, st) in sorted(plan.steps.items()):
            e = pro.axes[d]
            if e is not None and e[0] == role and d != (plan.q if role == "row" else -1):
                var = "k" if role == "k" else "n0"
                terms.append(f"{rsp[a] * st}LL * (({var} / {e[1]}LL) % {kdims[d]}LL)")
        return " + ".join(terms) or "0"

    lq = kdims[plan.q]
    vpr = -(-lq // vw)  # vectors per run of the innermost output axis
    ptr = r.pointer(plan.src)
    # the copy of the source with its halo: rows of the innermost axis, each at its padded place
    inner = plan.dims[-1]
    outer = 1
    for d in plan.dims[:-1]:
        outer *= d
    coord = " + ".join(f"{rsp[a]}LL * ((row / {_outer_stride(plan.dims, a)}LL) % {plan.dims[a]}LL + {plan.pads[a][0]})"
                       for a in range(len(plan.dims) - 1)) or "0"
    src_lines = [
        f"/* {name}: direct convolution (see luminal/codegen/gemm_direct.py) */",
        f"static int {name}(long long M, long long N, long long K, const {ctype} *A, long long sam, long long sak,",
        f"                  const {ctype} *Bpro, long long sbn, long long sbk, {ctype} *C, lm_epilogue epi,"
        " void **bufs, const long long *syms) {",
        f"    typedef {ctype} vT __attribute__((vector_size({vw * g.dtype.itemsize}), aligned({g.dtype.itemsize})));",
        f"    const {ctype} *restrict {ptr} = (const {ctype} *)bufs[{r.slot[plan.src]}];",
        "    (void)Bpro; (void)sbn; (void)sbk; (void)syms;",
        "    if (M <= 0 || N <= 0) return 0;",
        "    if (K <= 0) {",
        f"        for (long long m = 0; m < M; m++) memset(C + m * N, 0, (size_t)N * sizeof({ctype}));",
        "        return epi ? lm_epilogue_all(epi, bufs, syms, M, N) : 0;",
        "    }",
        f"    const long long MB = (M + {mr - 1}) / {mr}, XP = {plan.padded_size() + vw}LL;",
        f"    size_t bytes = (size_t)XP * sizeof({ctype}) + (size_t)(MB * {mr} * K) * sizeof({ctype}) + "
        "(size_t)K * sizeof(long long) + 128;",
        "    char *mem = (char *)lm_og_grow(&lm_dc_buf, &lm_dc_cap, bytes);",
        "    if (!mem) return 3;",
        f"    {ctype} *restrict xp = ({ctype} *)mem;",
        f"    {ctype} *restrict ap = ({ctype} *)(mem + (((size_t)XP * sizeof({ctype}) + 63) & ~(size_t)63));",
        f"    long long *restrict koff = (long long *)(ap + MB * {mr} * K);",
        "    const int par = !omp_in_parallel() && (double)M * (double)N * (double)K >= (double)LM_OWN_GEMM_PAR_MACS;",
        f"    memset(xp, 0, (size_t)XP * sizeof({ctype}));",
        "    #pragma omp parallel for schedule(static) if(par)",
        f"    for (long long row = 0; row < {outer}LL; row++)",
        f"        memcpy(xp + ({coord}) + {plan.pads[-1][0]}, {ptr} + row * {inner}LL, {inner} * sizeof({ctype}));",
        f"    for (long long k = 0; k < K; k++) koff[k] = {part('k')};",
        f"    for (long long mb = 0; mb < MB; mb++)",
        "        for (long long k = 0; k < K; k++)",
        f"            for (int i = 0; i < {mr}; i++)",
        f"                ap[(mb * K + k) * {mr} + i] = mb * {mr} + i < M ? A[(mb * {mr} + i) * sam + k * sak] : ({ctype})0;",
        f"    const long long nvec = N / {lq}LL * {vpr}LL, ntile = (nvec + {nv - 1}) / {nv};",
        "    int err = 0;",
        "    #pragma omp parallel for schedule(static) if(par)",
        "    for (long long t = 0; t < ntile; t++) {",
        f"        long long off[{nv}], at[{nv}], len[{nv}];",
        f"        const int nv = nvec - t * {nv} < {nv} ? (int)(nvec - t * {nv}) : {nv};",
        f"        for (int v = 0; v < {nv}; v++) {{",
        f"            const long long g = t * {nv} + (v < nv ? v : nv - 1), c = g % {vpr}LL;",
        f"            const long long n0 = g / {vpr}LL * {lq}LL + c * {vw}LL;",
        f"            at[v] = n0; len[v] = {lq}LL - c * {vw}LL < {vw} ? {lq}LL - c * {vw}LL : {vw};",
        f"            off[v] = {base}LL + c * {vw}LL + {part('row')};",
        "        }",
        f"        for (long long mb = 0; mb < MB; mb++) {{",
        f"            vT acc[{mr}][{nv}];",
        f"            for (int i = 0; i < {mr}; i++)",
        f"                for (int v = 0; v < {nv}; v++) acc[i][v] = (vT){{0}};",
        f"            const {ctype} *restrict a = ap + mb * K * {mr};",
        "            for (long long k = 0; k < K; k++) {",
        f"                vT b[{nv}];",
        f"                for (int v = 0; v < {nv}; v++) b[v] = *(const vT *)(xp + off[v] + koff[k]);",
        f"                for (int i = 0; i < {mr}; i++)",
        f"                    for (int v = 0; v < {nv}; v++) acc[i][v] += a[k * {mr} + i] * b[v];",
        "            }",
        "            for (int v = 0; v < nv; v++)",
        f"                for (int i = 0; i < {mr} && mb * {mr} + i < M; i++) {{",
        f"                    {ctype} *c = C + (mb * {mr} + i) * N + at[v];",
        f"                    if (len[v] == {vw}) *(vT *)c = acc[i][v];",
        f"                    else memcpy(c, &acc[i][v], (size_t)len[v] * sizeof({ctype}));",
        "                }",
        "        }",
        "        if (epi) {",
        "            int e = epi(bufs, syms, 0, M, at[0], at[nv - 1] + len[nv - 1]);",
        "            if (e) {",
        "                #pragma omp critical(lm_direct_err)",
        "                { if (!err) err = e; }",
        "            }",
        "        }",
        "    }",
        "    return err;",
        "}",
    ]
    head = _COMMON + "\n#ifndef LM_DIRECT_BUF\n#define LM_DIRECT_BUF\n" \
        "static __thread void *lm_dc_buf;\nstatic __thread size_t lm_dc_cap;\n#endif\n"
    return head + "\n".join(src_lines)


def _outer_stride(dims, a: int) -> int:
    """The flat-row stride of axis ``a`` over the rows of ``dims`` (all but the innermost axis)."""
    s = 1
    for d in dims[a + 1:-1]:
        s *= d
    return s
