"""Prologue fusion into luminal's own GEMM: an operand computed while it is packed, never stored.

A GEMM operand is often a copy made only for the GEMM: the im2col matrix of a convolution (the input seen
through overlapping windows; 42 MB per step for W4's second convolution), a transposed or strided view that
BLAS cannot address, a cast. :func:`lower` materializes such an operand with an elementwise kernel, and the
GEMM then packs it again. With prologue fusion the materializing kernel is dropped and the own GEMM
(:mod:`luminal.codegen.gemm`) evaluates the operand's value tree straight into its packed panels:

* :func:`prologue_candidates` finds the fusable operands of a lowered program, grouped by the buffer they
  replace (a buffer read by several GEMMs, e.g. the im2col matrix read by a convolution's forward and
  weight-gradient GEMMs, is fused in all of them or in none);
* :func:`fuse_prologues` returns the program with the chosen buffers removed and their readers' operands
  carried as :class:`Prologue` values (``GemmKernel.a_pro`` / ``b_pro``; kernel indices are unchanged, the
  materializing kernel becomes a no-op);
* :func:`render_pack` renders a pack callback ``(bufs, syms, batch, r0, rows, k0, kb, dst, W)`` that writes
  rows ``[r0, r0 + rows)`` x K ``[k0, k0 + kb)`` of the operand as ``W``-row slivers (zero-padded), the
  layout the own GEMM's ``pack_a`` / ``pack_b`` produce;
* :func:`fused_gemm_source` derives a fused own GEMM from :func:`~luminal.codegen.gemm.own_gemm_source`:
  the same blocking and microkernel, with the pack of a fused operand replaced by a call of its callback.
  The operand pointer of a fused operand is a :code:`lm_pro_T` record (callback and flat batch index).
  A matrix-vector product (M or N = 1) runs the blocked path too (the own GEMM's matrix-vector path reads
  its operands in place), so fusing one is measured like any other.

Which operand is fusable: an elementwise kernel whose output is read by GEMM kernels only, as an operand
(not a program output or alias), whose value has no gather and costs at most ``MAX_OPS`` operations per
element (its sizes may be symbolic: a batch of any size), and whose GEMM view splits the buffer's axes into
disjoint groups (batch axes, the row axis M or N, the K axis) so each axis's index is taken apart from one GEMM
index. The
OpenBLAS path always reads the materialized buffer; the choice between the two (see
:func:`luminal.runtime.search.search_prologues`) is measured, or forced with ``$LUMINAL_PROLOGUE``.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from .. import ops
from ..dtype import DType
from ..shape import Expression, ShapeTracker, to_expr
from .kernel import Compute, ElementwiseKernel, GatherValue, GemmKernel, Program
from .sizes import same_size
from .gemm_lowp import operand_stores
from .values import buffer_uses, kernel_buffers, walk, work_per_element

MAX_OPS = 8  # a prologue value costing more per element than this stays materialized (it would run per pack)


@dataclass(frozen=True)
class Prologue:
    """A fused GEMM operand: ``kernel`` (the dropped materializing kernel: its value over its own ``dims``)
    read through ``view`` (the operand's view ``(*batch, M, N, K)`` over that kernel's row-major output).
    ``axes[d]`` says which GEMM index gives the kernel's axis ``d``: ``(role, divisor)`` with role
    ``"row"`` (M for operand a, N for b), ``"k"`` or ``("batch", j)``, the coordinate being
    ``(index // divisor) % dims[d]``; None: the axis stays at 0."""
    kernel: ElementwiseKernel
    view: ShapeTracker
    side: str
    axes: tuple


def _ints(values) -> list | None:
    out = []
    for v in values:
        v = to_expr(v).to_int()
        if v is None:
            return None
        out.append(v)
    return out


def split_axes(dims, view: ShapeTracker, side: str) -> tuple | None:
    """The :attr:`Prologue.axes` of a buffer of ``dims`` read through the GEMM operand ``view`` on ``side``
    (``"a"`` or ``"b"``), or None when some GEMM index does not map onto whole buffer axes of its own (a
    sliced, overlapping or masked view) or a divisor is not a constant. Sizes and strides may be symbolic (a
    batch of any size): an axis of symbolic extent counts as longer than 1 (bound to 1, its coordinate is 0)."""
    if view.masks or to_expr(view.offset).to_int() != 0:
        return None
    d_e, v_dims, v_strides = [to_expr(d) for d in dims], [to_expr(d) for d in view.dims], \
        [to_expr(s) for s in view.strides]
    rs = [to_expr(1)] * len(d_e)
    for j in range(len(d_e) - 2, -1, -1):
        rs[j] = rs[j + 1] * d_e[j + 1]

    def longer(d):  # (a symbolic extent: yes)
        n = d_e[d].to_int()
        return n is None or n > 1
    nb = len(v_dims) - 3
    roles = [(("batch", j), j) for j in range(nb)] + [("row", nb if side == "a" else nb + 1), ("k", nb + 2)]
    axes: list = [None] * len(d_e)
    for role, g in roles:
        extent, stride = v_dims[g], v_strides[g]
        if extent.to_int() == 1 or stride.to_int() == 0:
            continue
        low = stride.bounds()[0]
        if low is None or low < 0:
            return None
        # the innermost buffer axis of the group: stride `stride`, longer than 1
        last = next((d for d in range(len(d_e) - 1, -1, -1) if same_size(rs[d], stride) and longer(d)), None)
        if last is None:
            return None
        prod, d = to_expr(1), last
        while not same_size(prod, extent) and d >= 0:
            if longer(d):
                div = (rs[d] // stride).to_int()
                if axes[d] is not None or div is None or not same_size(rs[d], stride * div):
                    return None
                axes[d] = (role, div)
                prod = prod * d_e[d]
            d -= 1
        if not same_size(prod, extent):
            return None
    return tuple(axes)


def prologue_candidates(program: Program) -> dict[int, list[tuple[int, str]]]:
    """Buffer -> ``[(GEMM kernel index, side), ...]`` for every buffer that :func:`fuse_prologues` can remove:
    written by one elementwise kernel, read only as GEMM operands (float32/float64, through views that
    :func:`split_axes` takes apart), not a program input, output or alias, its value cheap and gather-free."""
    writers, readers, pinned = buffer_uses(program)
    out: dict[int, list[tuple[int, str]]] = {}
    for buf, w in writers.items():
        kernel = program.kernels[w]
        if buf in pinned or not isinstance(kernel, ElementwiseKernel) or not readers.get(buf):
            continue
        if kernel.dtype not in (DType.float32, DType.float64) or any(
                isinstance(v, GatherValue) or isinstance(v, Compute) and isinstance(v.op, ops.Mod) and v.dtype.is_int
                for v in walk(kernel.value)):
            continue  # (gathers and integer modulo report errors, which a pack callback cannot return)
        if work_per_element(kernel.value) > MAX_OPS:
            continue
        uses, ok = [], True
        for r in readers[buf]:
            g = program.kernels[r]
            # (a GEMM with an operand stored as bfloat16 / float16 runs codegen.gemm_lowp, which has no packing hook)
            if not isinstance(g, GemmKernel) or g.dtype != kernel.dtype or r < w or \
                    operand_stores(program, g) is not None:
                ok = False
                break
            for side in ("a", "b"):
                if getattr(g, side) == buf:
                    if getattr(g, side + "_pro") is not None or \
                            split_axes(kernel.dims, getattr(g, side + "_view"), side) is None:
                        ok = False
                    uses.append((r, side))
            if _ints(g.dims[:-2]) is None:  # (a batch of GEMMs of constant count; M, N, K may be symbolic)
                ok = False
        if ok and uses:
            out[buf] = uses
    return out


def fuse_prologues(program: Program, buffers, packed=(), marginal=(), wino=None) -> Program:
    """``program`` with each buffer of ``buffers`` (keys of :func:`prologue_candidates`) no longer stored: its
    GEMM readers carry it as a :class:`Prologue` and its writer is dropped (the kernels after it move up one
    index: tables keyed by kernel index are built on the returned program); the readers of a buffer in
    ``packed`` pack it (never the direct convolution), those of one in ``marginal`` take the direct convolution
    in its marginal forms too (``GemmKernel.direct``); ``wino`` maps a buffer to the Winograd form of its readers
    (``GemmKernel.wino``: 0 none, 2 or 4 the tile size), or to one per reader (a tuple in the order the readers
    first appear in its uses; None: the rules'). Returns ``program`` itself when ``buffers`` is empty."""
    buffers, packed, marginal, wino = set(buffers), set(packed), set(marginal), dict(wino or {})
    if not buffers:
        return program
    cands = prologue_candidates(program)
    bad = buffers - set(cands)
    if bad:
        raise ValueError(f"fuse_prologues: buffers {sorted(bad)} cannot be fused")
    kernels = list(program.kernels)
    for buf in buffers:
        w = next(i for i, k in enumerate(kernels) if k is not None and k.out == buf)
        mat = kernels[w]
        readers, forms = list(dict.fromkeys(r for r, _ in cands[buf])), wino.get(buf)
        for r, side in cands[buf]:
            g = kernels[r]
            form = forms[readers.index(r)] if isinstance(forms, tuple) else forms
            view = getattr(g, side + "_view")
            pro = Prologue(mat, view, side, split_axes(mat.dims, view, side))
            kernels[r] = dataclasses.replace(g, **{side: None, side + "_pro": pro},
                                             **({"direct": False} if buf in packed else
                                                {"direct": "marginal"} if buf in marginal else {}),
                                             **({"wino": form} if form is not None else {}))
        kernels[w] = None
    new = Program([k for k in kernels if k is not None], {b: v for b, v in program.buffers.items() if b not in buffers},
                  list(program.inputs), list(program.outputs), dict(program.aliases))
    return new


def is_fused(kernel) -> bool:
    """Whether ``kernel`` is a GEMM with a fused prologue (it then runs the own GEMM, never OpenBLAS)."""
    return isinstance(kernel, GemmKernel) and (kernel.a_pro is not None or kernel.b_pro is not None)


# ---------------------------------------------------------------------------- C
PRO_TYPES = r"""
#ifndef LM_PRO_TYPES
#define LM_PRO_TYPES
/* a fused GEMM operand: fn writes rows [r0, r0+rows) x K [k0, k0+kb) of batch element bi as W-row slivers
   (dst[s*kb + k*W + i] = op(r0 + s + i, k0 + k), zero past the rows) */
typedef void (*lm_pack_f32)(void **, const long long *, long long, long long, long long, long long, long long,
                            float *restrict, long long);
typedef void (*lm_pack_f64)(void **, const long long *, long long, long long, long long, long long, long long,
                            double *restrict, long long);
typedef struct { lm_pack_f32 fn; long long bi; } lm_pro_f32;
typedef struct { lm_pack_f64 fn; long long bi; } lm_pro_f64;
#endif
"""


def fused_name(choice_fn: str, a: bool, b: bool) -> str:
    """The C name of the fused variant of the own-GEMM function ``choice_fn`` (operands ``a`` / ``b`` fused)."""
    return f"{choice_fn}_pro{'a' if a else ''}{'b' if b else ''}"


def fused_gemm_source(dtype: str, cfg, name: str, a: bool, b: bool) -> str:
    """C of the own GEMM ``name`` (blocking ``cfg``) whose operand ``a`` and/or ``b`` is a fused prologue: the
    argument is then a ``const lm_pro_T *`` (cast to ``const T *``) and its strides are ignored. Same
    signature and results as :func:`~luminal.codegen.gemm.own_gemm_source`; a failed packing-buffer
    allocation returns error 3 (the unfused code falls back to plain loops over the operands instead)."""
    from .gemm import own_gemm_source

    if not (a or b):
        raise ValueError("fused_gemm_source: no operand is fused")
    short = "f32" if dtype == "float32" else "f64"
    ctype = "float" if dtype == "float32" else "double"
    src = own_gemm_source(dtype, cfg, name)
    subs = []
    if a:
        subs.append((f"{name}_pack_a(mb, kb, A + ic * sam + pc * sak, sam, sak, ap);",
                     f"((const lm_pro_{short} *)(const void *)A)->fn(bufs, syms, ((const lm_pro_{short} *)"
                     f"(const void *)A)->bi, ic, mb, pc, kb, ap, {cfg.mr});"))
    if b:
        subs.append((f"{name}_pack_b(c1 - c0, kb, B + (jc + c0) * sbn + pc * sbk, sbn, sbk, bp + c0 * kb);",
                     f"((const lm_pro_{short} *)(const void *)B)->fn(bufs, syms, ((const lm_pro_{short} *)"
                     f"(const void *)B)->bi, jc + c0, c1 - c0, pc, kb, bp + c0 * kb, {cfg.nr});"))
    subs.append(("if (M == 1 || N == 1) {", "if (0) {  /* (fused: no matrix-vector path) */"))
    for old, new in subs:
        if src.count(old) != 1:
            raise RuntimeError(f"fused_gemm_source: the own GEMM template changed; cannot find {old!r}")
        src = src.replace(old, new)
    # the unfused fallback for a failed allocation reads the operands directly: an error instead
    src = re.sub(rf"\b{name}_naive\(", f"{name}_nomem(", src)
    src = src.replace(f"static int {name}_nomem(", f"static __attribute__((unused)) int {name}_naive(")
    nomem = (f"static int {name}_nomem(long long m0, long long m1, long long n0, long long n1, long long N, "
             f"long long K, const {ctype} *A, long long sam, long long sak, const {ctype} *B, long long sbn, "
             f"long long sbk, {ctype} *C, lm_epilogue epi, void **bufs, const long long *syms) {{\n"
             "    (void)m0; (void)m1; (void)n0; (void)n1; (void)N; (void)K; (void)A; (void)sam; (void)sak; (void)B;\n"
             "    (void)sbn; (void)sbk; (void)C; (void)epi; (void)bufs; (void)syms;\n    return 3;\n}\n")
    head = f"/* {name}: own GEMM with fused prologue(s) */\n"
    at = src.index(f"static int {name}(long long M")
    return PRO_TYPES + head + src[:at] + nomem + src[at:]


def pack_functions(renderer, k: int, kernel: GemmKernel):
    """The pack callbacks of GEMM ``kernel`` (the ``k``-th rendered kernel) for its fused operands:
    ``((name_a | None, name_b | None[, direct]), C text)``; ``direct``: the direct-convolution function
    (:mod:`.gemm_direct`) that replaces the fused GEMM where the kernel qualifies (its window operand then has no
    callback: ``"NULL"``). Named ``epilogue_<k>_pa``/``_pb``/``_dc`` so that the renderer's sharing of identical
    kernel bodies renames them with the epilogue."""
    from .gemm_direct import direct_plan, render_direct

    plan = direct_plan(renderer.program, kernel)
    names, texts = [], [PRO_TYPES]
    for side, pro in (("a", kernel.a_pro), ("b", kernel.b_pro)):
        if pro is None or plan is not None and pro.side == ("b" if kernel.b_pro is not None else "a"):
            names.append(None if pro is None else "NULL")  # (the direct kernel reads the window in place)
            continue
        names.append(f"epilogue_{k}_p{side}")
        texts.append(render_pack(renderer, names[-1], pro, kernel.dims[:-2]))
    if plan is not None:  # a window view read in place (gemm_direct): the GEMM function is this one
        names.append(f"epilogue_{k}_dc")
        texts.append(render_direct(renderer, names[-1], kernel, plan))
    return tuple(names), "\n\n".join(texts)


def fused_call(renderer, kernel: GemmKernel, name: str, assign: bool, packs, batch_vars, offsets, epilogue) -> str:
    """C of one call of the fused GEMM function ``name`` for ``kernel`` (inside the renderer's batch loops over
    ``batch_vars``): a fused operand is passed as a ``lm_pro_T`` record ``{callback, flat batch index}`` with
    strides 0, the other as pointer + offset and strides; ``offsets`` are the (a, b, c) offsets at the batch
    index."""
    idx = renderer.index
    nb = len(kernel.dims) - 2
    short, ctype = ("f32", "float") if kernel.dtype == DType.float32 else ("f64", "double")
    if len(packs) > 2:  # the direct convolution (same signature)
        name = packs[2]
    bi = to_expr(0)
    for v, s in zip(batch_vars, ShapeTracker.contiguous_of(kernel.dims[:nb]).strides if nb else []):
        bi = bi + v * s
    decl, args = [], []
    for side, pack, off, view, mn in (("a", packs[0], offsets[0], kernel.a_view, nb),
                                      ("b", packs[1], offsets[1], kernel.b_view, nb + 1)):
        if pack is not None:
            decl.append(f"lm_pro_{short} p{side} = {{{pack}, {idx(bi)}}};")
            args.append(f"(const {ctype} *)(const void *)&p{side}, 0, 0")
        else:
            args.append(f"{renderer.pointer(getattr(kernel, side))} + {idx(off)}, {idx(view.strides[mn])}, "
                        f"{idx(view.strides[nb + 2])}")
    m, n, k = kernel.dims[-2], kernel.dims[-1], kernel.a_view.dims[-1]
    return (f"{{ {' '.join(decl)} {'err = ' if assign else ''}{name}({idx(m)}, {idx(n)}, {idx(k)}, {args[0]}, "
            f"{args[1]}, {renderer.pointer(kernel.out)} + {idx(offsets[2])}, {epilogue}, bufs, syms); }}")


def render_pack(renderer, name: str, pro: Prologue, batch_dims) -> str:
    """The C pack callback ``name`` of ``pro`` (see :data:`PRO_TYPES`) rendered through ``renderer`` (a
    :class:`~luminal.codegen.c.CRenderer`: buffer slots, symbols, constants); ``batch_dims`` are the GEMM's
    batch sizes (its flat batch index is taken apart over them)."""
    from .emit import KernelWriter

    kernel = pro.kernel
    sizes = [to_expr(d) for d in kernel.dims]
    dims = [str(d.to_int()) if d.is_constant() else f"({renderer.index(d)})" for d in sizes]  # (as C)
    ctype = kernel.dtype.c_type
    r = renderer
    lines = [f"static void {name}(void **bufs, const long long *syms, long long bi, long long r0, long long rows, "
             f"long long k0, long long kb, {ctype} *restrict dst, long long W) {{",
             "    int err = 0; (void)err; (void)bi;"]
    for s in r.symbols:
        lines.append(f"    const long long {r.names[s]} = syms[{r.symbols.index(s)}]; (void){r.names[s]};")
    for b in sorted(kernel_buffers(kernel) - {kernel.out}, key=lambda x: r.slot[x]):
        t = r.program.buffers[b][1].c_type
        lines.append(f"    const {t} *restrict {r.pointer(b)} = (const {t} *)bufs[{r.slot[b]}];")
    r.constants, at = {}, len(lines)
    bstrides = ShapeTracker.contiguous_of(batch_dims).strides if batch_dims else []
    bsizes = [to_expr(d).to_int() for d in batch_dims]
    vars_, row_axes = [], []
    for d, entry in enumerate(pro.axes):
        if entry is None:
            vars_.append(to_expr(0))
            continue
        role, div = entry
        var = Expression.symbol(f"p{d}", sizes[d].to_int() - 1 if sizes[d].is_constant() else sizes[d] - 1)
        vars_.append(var)
        if role == "row":
            row_axes.append((d, div))
        elif role != "k":  # a batch axis j: its coordinate from bi, then this axis's from that
            j = role[1]
            lines.append(f"    const long long p{d} = (((bi / {to_expr(bstrides[j]).to_int()}) % {bsizes[j]}) / {div})"
                         f" % {dims[d]};")
    k_axes = [(d, e[1]) for d, e in enumerate(pro.axes) if e is not None and e[0] == "k"]
    w = KernelWriter(r)
    v = w.emit(kernel.value, tuple(vars_))
    if _k_inner(pro):
        lines += _rows_outer(row_axes, k_axes, dims, w.lines, v, ctype)
    else:
        lines += _k_outer(row_axes, k_axes, dims, w.lines, v, ctype)
    lines.append("}")
    lines[at:at] = [f"    {decl}" for _, decl in r.constants.values()]
    return "\n".join(lines)


def _k_inner(pro: Prologue) -> bool:
    """Whether the pack walks K innermost: when the buffer's innermost long axis comes from K (e.g. the im2col
    matrix of a weight gradient, whose K index runs along image rows), so reads along it are contiguous."""
    for entry in reversed(pro.axes):
        if entry is not None:
            return entry[0] == "k"
    return False


def _runs(axes, dims, count: str, base: str, split_w: bool) -> list[str]:
    """C building a table of *runs* over ``count`` consecutive indices from ``base``: stretches along which only
    the innermost of ``axes`` (divisor 1) moves, also cut at multiples of W when ``split_w`` (sliver
    boundaries). Run u starts at index ru[u], is rl[u] long, and has the coordinates rc<d>[u] there."""
    out = [f"    const long long cap = {count} + {count} / W + 2;", "    long long ru[cap], rl[cap];"]
    out += [f"    int rc{d}[cap];" for d, _ in axes]
    inner = axes[-1][0] if axes else None
    out.append("    long long nrun = 0;")
    out.append(f"    for (long long x = 0; x < {count}; ) {{")
    out.append(f"        const long long at = {base} + x;")
    out += [f"        rc{d}[nrun] = (int)((at / {div}) % {dims[d]});" for d, div in axes]
    out.append(f"        long long len = {count} - x;")
    if inner is not None:
        out.append(f"        if (len > {dims[inner]} - rc{inner}[nrun]) len = {dims[inner]} - rc{inner}[nrun];")
    if split_w:
        out.append("        if (len > W - x % W) len = W - x % W;")
    out.append("        ru[nrun] = x; rl[nrun] = len; nrun++; x += len;")
    out.append("    }")
    return out


def _k_outer(row_axes, k_axes, dims, body, v, ctype) -> list[str]:
    """Pack loops: K outer (its coordinates taken apart once per k); inside, the runs of rows along their
    innermost axis (:func:`_runs`), each a contiguous vector loop into its sliver."""
    out = _runs(row_axes, dims, "rows", "r0", True)
    q = row_axes[-1][0] if row_axes else None
    out.append("    const long long tail = rows % W ? W - rows % W : 0, last = rows - rows % W;")
    out.append("    for (long long k = 0; k < kb; k++) {")
    out.append("        const long long kk = k0 + k; (void)kk;")
    out += [f"        const long long p{d} = (kk / {div}) % {dims[d]};" for d, div in k_axes]
    out.append("        for (long long u = 0; u < nrun; u++) {")
    out.append("            const long long x0 = ru[u], len = rl[u];")
    out += [f"            const long long c{d} = rc{d}[u];" for d, _ in row_axes]
    out.append(f"            {ctype} *restrict o = dst + (x0 / W * W) * kb + k * W + x0 % W;")
    out.append("            #pragma omp simd")
    out.append("            for (long long x = 0; x < len; x++) {")
    out += [f"                const long long p{d} = c{d}{' + x' if d == q else ''};" for d, _ in row_axes]
    out += ["                " + x for x in body]
    out.append(f"                o[x] = ({ctype})({v});")
    out += ["            }", "        }"]
    out.append(f"        for (long long j = 0; j < tail; j++) dst[last * kb + k * W + (W - tail) + j] = ({ctype})0;")
    out += ["    }"]
    return out


def _rows_outer(row_axes, k_axes, dims, body, v, ctype) -> list[str]:
    """Pack loops: per sliver, each row (coordinates taken apart once per row) computed along K into a row-major
    scratch block -- the runs of K along its innermost axis (:func:`_runs`), contiguous vector loops -- and
    the block transposed into the sliver in register blocks (``lm_og_packt``); padding rows are zeroed."""
    out = _runs(k_axes, dims, "kb", "k0", False)
    q = k_axes[-1][0] if k_axes else None
    out.append(f"    {ctype} tmp[W * (kb > 0 ? kb : 1)] __attribute__((aligned(64)));")
    out.append("    for (long long s = 0; s < rows; s += W) {")
    out.append("        const long long n = rows - s < W ? rows - s : W;")
    out.append("        for (long long i = 0; i < n; i++) {")
    out.append(f"            {ctype} *restrict o = tmp + i * kb;")
    out.append("            const long long rr = r0 + s + i; (void)rr;")
    out += [f"            const long long p{d} = (rr / {div}) % {dims[d]};" for d, div in row_axes]
    out.append("            for (long long u = 0; u < nrun; u++) {")
    out.append("                const long long x0 = ru[u], len = rl[u];")
    out += [f"                const long long c{d} = rc{d}[u];" for d, _ in k_axes]
    out.append(f"                {ctype} *restrict ou = o + x0;")
    out.append("                #pragma omp simd")
    out.append("                for (long long x = 0; x < len; x++) {")
    out += [f"                    const long long p{d} = c{d}{' + x' if d == q else ''};" for d, _ in k_axes]
    out += ["                    " + x for x in body]
    out.append(f"                    ou[x] = ({ctype})({v});")
    out += ["                }", "            }", "        }"]
    out.append(f"        lm_og_packt_{ctype}(n, kb, tmp, kb, dst + s * kb, W);")
    out.append("        if (n < W)")
    out.append("            for (long long k = 0; k < kb; k++)")
    out.append(f"                for (long long i = n; i < W; i++) dst[s * kb + k * W + i] = ({ctype})0;")
    out.append("    }")
    return out
