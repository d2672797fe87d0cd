"""Attention on the CPU as one kernel: the scores GEMM, the softmax row group and the probabilities GEMM run
block of query rows by block of query rows, the block's scores and probabilities in a per-thread buffer.

The kernel IR of ``softmax(f(Q K^T)) V`` is a GEMM writing the scores ``S`` (batch x M x NK), a row group
computing the softmax of ``f(S)`` (``f``: the scale, a mask's bias) and a GEMM of the probabilities ``P`` with
``V``: unfused, ``S`` and ``P`` go to memory and back (8 heads over 2048 tokens: 134 MB each), and the row group
is bound by that traffic. The same chain that the Triton renderer fuses
(:func:`luminal.codegen.triton_attention.find_attention`) is rendered here as one parallel loop over (batch,
block of ``MB`` query rows): the scores of the block by the GEMM routine (``lm_gemm_f32`` or the searched one)
into the thread's scratch (``lm_row_scratch``), the row group's members row by row over it, the block's output
rows by the GEMM routine from the scratch probabilities (``MB``: :data:`BLOCK_ROWS`, :data:`MASKED_ROWS`). The
softmax is the reference's (maximum, exponentials, sum, reciprocal, product), not the online form: a block
holds whole rows, so results equal the unfused program's up to the GEMMs' summation order.

Keys no query row of a block can see are skipped (causal masks, padding at the end of a sequence): where
``f(S) = c * S + R`` (``R``: one or more terms that do not read ``S``, a mask's ``0 / -inf`` bias), the
kernel scans ``R`` over the block's rows first and runs both GEMMs and the row group only over the keys up to
the last one with ``R > -inf`` in some row (at least one key: a row that sees nothing is NaN, as in the
reference). A skipped key's score would have been ``-inf``, its probability 0, for every finite score: so the
results are the reference's, except where a masked position's score is itself NaN or infinite (a NaN or inf
in ``Q`` or ``K``): the reference's row is NaN there, the fused kernel's is not (as torch's flash kernels).
A finite mask value at or below :data:`MASK_FLOOR` (-1e30: Hugging Face's ``finfo.min`` padding masks) hides a
key the same way in a row that sees another key above the floor (their exponential underflows to exactly 0
for any score below ~1e29); a row that sees no key above it keeps all of them (the reference's softmax over
``finfo.min`` scores is an average).

Where the probabilities are read after the P.V GEMM (a training step's backward, which the softmax's
gradient rule lets read them alone) or are an output (attention weights), the kernel stores them in their arena
buffer, zeros at the skipped keys; the scores and exponentials stay in scratch.

The same rendering takes any chain of that shape whose row group is not a softmax: attention's backward,
``dP = dO V^T``, ``dS = P (dP - sum(dP P))``, ``dQ = dS K``, where ``dP`` then never goes to memory. There a key is
skipped when a factor of every product over the row (``P``) is 0 in every row of the block (:func:`zero_factor`:
the forward's causal zeros), unless ``dP`` is not finite there (the reference's ``0 * inf`` is NaN). The chain
runs where ``dS`` is first read (the ``dK = dS^T Q`` GEMM, before ``dQ``'s).

The backward's other products, ``dK = dS^T Q`` and ``dV = P^T dO``, contract over the query rows: where the
stored ``P`` / ``dS`` have zeros at keys a mask hides (a softmax chain with a key scan, or a backward chain
whose zero factor is such a ``P``), they run in blocks of keys, each over only the query rows where its block
of ``P`` / ``dS`` is not all 0 (:meth:`AttentionCRendering._trimmed_gemm`: found by scanning from both ends).

``LUMINAL_FUSED_ATTENTION=0`` turns this off.
"""

from __future__ import annotations

import math
import os
from dataclasses import replace

from ..dtype import DType
from ..shape import Expression, ShapeTracker, to_expr
from .c_reduce import small_extent
from .emit import KernelWriter
from .gemm_lowp import lowp_name, operand_stores
from .groups import row_locals
from .kernel import ConstValue, ElementwiseKernel, GatherValue, GemmKernel, Load, ReduceKernel, Remapped
from .triton_attention import _is_load, _op, _softmax_members, find_attention
from .values import kernel_buffers, walk

# query rows per block: at most BLOCK_ROWS (MASKED_ROWS where keys may be skipped), fewer where the block's scores
# and probabilities would pass BLOCK_BYTES or the blocks would be fewer than 4 per thread. Measured (2 cores, 8-12
# heads of 64): bigger blocks run the GEMMs faster (they pack K and V once per block: 12 x 1024 keys 23.1 ms at 64
# rows, 21.5 at 256), smaller ones skip more of a causal mask (4 x 12 x 512: 14.9 ms at 64 rows, 17.8 at 256)
BLOCK_ROWS, MASKED_ROWS, BLOCK_BYTES = 256, 64, 1 << 22
# multiply-adds of the chain (both products) from which its blocks run on all threads: as a GEMM call does
# (LM_SPLIT_MACS); PARALLEL_WORK (2^20 element-ops, for generated loops) kept a 12-head 32 x 32 x 32 layer (786K
# multiply-adds, BERT at 1 x 32) on one thread: 63 -> 41 us on two (min of 15 alternating rounds, 2026-11-29)
PARALLEL_MACS = 1 << 16
SLOT_S, SLOT_P = 6, 7  # their lm_row_scratch slots (a row group's own row-local buffers take 0..5)
TRIM_BLOCK = 128  # the free-axis block of a GEMM trimmed to an operand's nonzero rows (_trimmed_gemm)
SCRATCH_ERROR = 5  # the kernel's error code when a thread cannot allocate its scratch (runtime.cpu_plan.KERNEL_ERRORS)


def attention_groups(program, groups: list, uses) -> tuple[list, set]:
    """``(groups, fused)``: the rendered groups with each attention chain the C renderer fuses made one group
    ``[Q.K^T GEMM, row group..., P.V GEMM]`` where the probabilities are first read (every operand of the chain
    computed by then), and the set of those groups (as tuples). A chain is fused when :func:`find_attention`
    finds it, its GEMMs have no fused prologue and the P.V GEMM no epilogue, over rows longer than a pooling
    window (operands stored in or rounded to bfloat16 / float16, autocast's, are multiplied by the
    low-precision GEMMs, :mod:`luminal.codegen.gemm_lowp`)."""
    if os.environ.get("LUMINAL_FUSED_ATTENTION", "1") == "0":
        return groups, set()
    kernels = program.kernels
    writers, readers, pinned = uses
    epilogues = {g[0]: g for g in groups if len(g) == 2 and isinstance(kernels[g[0]], GemmKernel)}
    rows = [g for g in groups if len(g) > 1 and isinstance(kernels[g[0]], ReduceKernel)]
    chains = {}
    found = find_attention(program, rows, readers, pinned, epilogues, shared_probabilities=True, any_rows=True)
    for g1i, (g0i, group) in found.items():
        g0, g1, last = kernels[g0i], kernels[g1i], kernels[group[-1]]
        space = tuple(kernels[group[0]].dims) + (kernels[group[0]].extent,)
        if (g1i in epilogues or any(x is not None for g in (g0, g1) for x in (g.a_pro, g.b_pro))
                or not isinstance(last, ElementwiseKernel) or tuple(last.dims[:len(space)]) != space
                or small_extent(kernels[group[0]].extent) or len(row_locals(program, group, uses)) > SLOT_S):
            continue
        # the chain runs where its probabilities are first read (the P.V GEMM, or an earlier reader: the
        # backward's dK GEMM reading dS transposed), when everything it reads is computed by then
        at = min([g1i, *readers.get(last.out, ())])
        inside = [g0i, *group, g1i]
        made = {kernels[i].out for i in inside}
        if any(writers.get(b, -1) >= at for i in inside for b in kernel_buffers(kernels[i]) - made):
            continue
        chains[at] = inside
    dropped = {i for inside in chains.values() for i in (inside[0], inside[1], inside[-1])}  # (groups' first)
    out, fused = [], set()
    for g in groups:
        for at, inside in chains.items():
            if at in g:
                out.append(inside)
                fused.add(tuple(inside))
        if g[0] not in dropped:
            out.append(g)
    return out, fused


def stored_probabilities(program, group, uses) -> bool:
    """Whether the fused chain ``group`` stores its probabilities in their arena buffer: something after the
    P.V GEMM reads them (a training step's backward) or they are an output (attention weights)."""
    _, readers, pinned = uses
    p = program.kernels[group[-2]].out
    return p in pinned or readers.get(p, []) != [group[-1]]


def scratch_buffers(program, group, uses) -> list:
    """The buffers of a fused chain ``group`` that live only in per-thread scratch: the scores, the
    probabilities (unless :func:`stored_probabilities`) and the row group's row-local buffers (the arena gives
    them no bytes)."""
    kernels = program.kernels
    p = [] if stored_probabilities(program, group, uses) else [kernels[group[-2]].out]
    return [kernels[group[0]].out, *p, *row_locals(program, group[1:-1], uses)]


def gemm_offsets(kernel: GemmKernel) -> tuple:
    """``(batch variables, A offset, B offset, C offset, batch count)`` of a GEMM kernel's call for the batch index
    ``i0, i1, ...`` (expressions; C row-major over the kernel's dims)."""
    nb = len(kernel.dims) - 2
    zero = to_expr(0)
    bvars = tuple(Expression.symbol(f"i{j}", d - 1) for j, d in enumerate(kernel.dims[:nb]))
    av, bv = kernel.a_view, kernel.b_view
    a_off = av.offset + sum((s * v for s, v in zip(av.strides[:nb], bvars)), zero)
    b_off = bv.offset + sum((s * v for s, v in zip(bv.strides[:nb], bvars)), zero)
    c_off = sum((v * s for v, s in zip(bvars, ShapeTracker.contiguous_of(tuple(kernel.dims)).strides[:nb])), zero)
    batch = to_expr(1)
    for d in kernel.dims[:nb]:
        batch = batch * d
    return bvars, a_off, b_off, c_off, batch


# a softmax's mask term at or below this hides its key from a row that sees another key above it (module docstring)
MASK_FLOOR = -1e30


def skip_values(program, members_i: list, s_buf: int, uses):
    """``(values, softmax)``: the values that decide which keys a block of the fused chain over the row group
    ``members_i`` (scores buffer ``s_buf``) may skip: a softmax's mask terms (:func:`mask_terms`, a key is seen
    where they are above -inf), another chain's zero factor (:func:`zero_factor`, seen where it is not 0); None
    when no key may be skipped."""
    members = [program.kernels[i] for i in members_i]
    if _softmax_of(members):
        rest = mask_terms(members[0].value, s_buf)
        return None if rest is None else (rest, True)
    z = zero_factor(program, members_i, s_buf, uses)
    return None if z is None else ([z], False)


def _keeps_zero(value, is_p) -> bool:
    """Whether ``value`` is 0 wherever the probability is (a key the fused chain skips): every value it can
    select is the probability (``is_p``), a zero or outside a view's mask (which reads 0), whatever the select's
    index."""
    def zero(v):
        if is_p(v):
            return True
        if isinstance(v, ConstValue):
            return not isinstance(v.value, Expression) and float(v.value) == 0
        if isinstance(v, GatherValue):
            return v.data is not None and zero(v.data)
        if isinstance(v, Remapped):
            return zero(v.value)
        return _op(v, "Add", 2) and zero(v.args[0]) and zero(v.args[1])
    return zero(value)


def _softmax_of(members) -> bool:
    """Whether the row group ``members`` is a softmax (:func:`_softmax_members`), possibly with its probabilities
    passed through a last member that keeps their zeros (:func:`_keeps_zero`): ONNX exports of PyTorch's
    attention end the softmax with ``where(isnan(p), 0, p)``, stored or computed with the product inlined."""
    if _softmax_members(members):
        return True
    *head, last = members
    if not isinstance(last, ElementwiseKernel) or len(head) < 4:
        return False
    if _softmax_members(head) and _keeps_zero(last.value, lambda v: _is_load(v, head[-1].out)):
        return True
    n = len(members[0].dims)
    for v in walk(last.value):  # the product e * r inlined into the last member
        if _op(v, "Mul", 2) and _softmax_members(head + [replace(last, value=v, dims=tuple(last.dims[:n + 1]))]):
            return _keeps_zero(last.value, lambda u: u == v)
    return False


def zero_padded_buffers(program, fused, uses) -> set:
    """The buffers the fused chains ``fused`` (in execution order) store with zeros at keys a mask hides: a
    softmax chain's stored probabilities when its mask lets keys be skipped, a chain's ``dS`` when its zero factor
    is such a buffer (the backward of a masked softmax). GEMMs contracting over their rows trim those rows
    (:meth:`AttentionCRendering._trimmed_gemm`)."""
    out = set()
    for group in sorted(fused):
        scan = skip_values(program, list(group[1:-1]), program.kernels[group[0]].out, uses)
        if scan is not None and stored_probabilities(program, group, uses) and (
                scan[1] or scan[0][0].buffer in out):
            out.add(program.kernels[group[-2]].out)
    return out


def _terms(v) -> list:
    return _terms(v.args[0]) + _terms(v.args[1]) if _op(v, "Add", 2) else [v]


def mask_terms(f, scores: int):
    """The terms ``R`` of ``f = c * S + R`` (see the module docstring), or None: ``f`` a sum whose one term
    reading the scores buffer is the scores themselves, possibly times a finite constant."""
    terms = _terms(f)
    reading = [t for t in terms if any(isinstance(u, Load) and u.buffer == scores for u in walk(t))]
    if len(reading) != 1:
        return None
    t = reading[0]

    def finite(a):
        return isinstance(a, ConstValue) and not isinstance(a.value, Expression) and math.isfinite(float(a.value))

    if not (_is_load(t, scores) or _op(t, "Mul", 2) and (
            _is_load(t.args[0], scores) and finite(t.args[1]) or _is_load(t.args[1], scores) and finite(t.args[0]))):
        return None
    rest = [u for u in terms if u is not t]
    return rest or None


def _factors(v, outs: set, space: tuple) -> dict:
    """Buffer -> ``Load`` for the loads that are factors of the product ``v`` (a tree of ``Mul``), reading a
    buffer not in ``outs`` plainly over ``space``."""
    if isinstance(v, Load):
        return {v.buffer: v} if v.buffer not in outs and v.view == ShapeTracker.contiguous_of(space) else {}
    if _op(v, "Mul", 2):
        return {**_factors(v.args[0], outs, space), **_factors(v.args[1], outs, space)}
    return {}


def zero_factor(program, members_i: list, scores: int, uses):
    """For a fused chain that is not a softmax (attention's backward: ``t = sum(dP P)``, ``dS = P (dP - t)``):
    the ``Load`` of a buffer ``Z`` (not the ``scores`` the chain computes) that is a factor of every sum over the
    row and of the last member, where the other members over the row are row-local; then keys where ``Z`` is 0
    in every row of a block contribute nothing (0 times any finite value) and are skipped. None otherwise."""
    kernels = program.kernels
    members = [kernels[i] for i in members_i]
    n = len(members[0].dims)
    space = tuple(members[0].dims) + (members[0].extent,)
    outs = {m.out for m in members} | {scores}
    local = set(row_locals(program, members_i, uses))
    common = None
    for m in members:
        if not (isinstance(m, ReduceKernel) or len(m.dims) > n and m.dims[n] != 1):
            continue  # (a value per row)
        if isinstance(m, ReduceKernel) and m.kind != "sum":
            return None
        if isinstance(m, ElementwiseKernel) and m is not members[-1]:
            if m.out not in local:
                return None  # (computed over the visible keys only: nothing outside may read it)
            continue
        found = _factors(m.value, outs, space)
        common = found if common is None else {b: common[b] for b in common if b in found}
    return common[min(common)] if common else None


class AttentionCRendering:
    """The fused attention of :class:`~luminal.codegen.c.CRenderer` (which provides ``program``, ``uses``,
    ``index``, ``pointer``, ``local_rows``, ``gemm_impl``, ``_row_body``)."""

    def _gemm_name(self, i: int, kernel: GemmKernel) -> str:
        stores = operand_stores(self.program, kernel)
        if stores:  # bfloat16 / float16 operands, or float32 ones read rounded (autocast): codegen.gemm_lowp
            return lowp_name(*stores)
        fn = self.gemm_impl.get(i)
        fn = fn[0] if isinstance(fn, tuple) else fn
        return fn or ("lm_gemm_f32" if kernel.dtype == DType.float32 else "lm_gemm_f64")

    def _attention_chain(self, group: list, lines: list) -> None:
        """The fused attention kernel of ``group`` (see :func:`attention_groups` and the module docstring)."""
        kernels = self.program.kernels
        g0i, members_i, g1i = group[0], group[1:-1], group[-1]
        g0, g1 = kernels[g0i], kernels[g1i]
        members = [kernels[i] for i in members_i]
        mx, pr = members[0], members[-1]
        rows = tuple(mx.dims)
        nb = len(rows) - 1
        M, NK, D = rows[-1], to_expr(mx.extent), to_expr(g1.dims[-1])
        K = g0.a_view.dims[-1]
        idx = self.index
        zero = to_expr(0)
        bvars = tuple(Expression.symbol(f"i{j}", d - 1) for j, d in enumerate(rows[:nb]))
        rvar = Expression.symbol(f"i{nb}", M - 1)
        row_strides = ShapeTracker.contiguous_of(rows).strides

        def flat_at(r):
            return sum((v * s for v, s in zip(bvars + (r,), row_strides)), zero)

        av, bv, vv = g0.a_view, g0.b_view, g1.b_view
        a_off = av.offset + sum((s * v for s, v in zip(av.strides[:nb], bvars)), zero)
        b_off = bv.offset + sum((s * v for s, v in zip(bv.strides[:nb], bvars)), zero)
        v_off = vv.offset + sum((s * v for s, v in zip(vv.strides[:nb], bvars)), zero)
        o_off = sum((v * s for v, s in zip(bvars, ShapeTracker.contiguous_of(tuple(g1.dims)).strides[:nb])), zero)
        s_buf, p_buf = g0.out, pr.out
        ctype = "float"
        batch = to_expr(1)
        for d in rows[:nb]:
            batch = batch * d
        macs = batch * M * NK * (K + D)
        ind = "    " * (nb + 2)
        scan = self._key_scan(members_i, s_buf, NK)
        cap = BLOCK_ROWS if scan is None else MASKED_ROWS
        lines.append("    const long long lm_t4 = 4 * (long long)omp_get_max_threads();")
        lines.append(f"    const long long lm_mb = LUMINAL_MAX(8, LUMINAL_MIN(LUMINAL_MIN({cap}, {BLOCK_BYTES // 8} / "
                     f"LUMINAL_MAX(1, {idx(NK)})), ({idx(batch * M)} + lm_t4 - 1) / lm_t4) / 8 * 8);")
        lines.append(f"    const long long lm_nblk = (({idx(M)}) + lm_mb - 1) / lm_mb;")
        lines.append(f"    #pragma omp parallel for collapse({nb + 1}) schedule(dynamic, 1) "
                     f"if(({idx(macs)}) >= {PARALLEL_MACS})")
        for j, d in enumerate(rows[:nb]):
            lines.append(f"    {'    ' * j}for (long long i{j} = 0; i{j} < {idx(d)}; i{j}++) {{")
        lines.append(f"    {'    ' * nb}for (long long lm_b = 0; lm_b < lm_nblk; lm_b++) {{")
        body = [f"const long long lm_m0 = lm_b * lm_mb, lm_m1 = LUMINAL_MIN(lm_m0 + lm_mb, {idx(M)});"]
        body += self._visible_keys(scan, bvars, rvar, NK)
        locals_ = row_locals(self.program, members_i, self.uses)
        # every scratch buffer reserved here: the per-row calls below then cannot fail
        block_bytes = f"(lm_m1 - lm_m0) * lm_nkv * (long long)sizeof({ctype})"
        body.append(f"{ctype} *const lm_s = ({ctype} *)lm_row_scratch({SLOT_S}, {block_bytes}, NULL);")
        ptype = self.program.buffers[p_buf][1].c_type  # (bfloat16 bits under autocast)
        p_bytes = f"(lm_m1 - lm_m0) * lm_nkv * (long long)sizeof({ptype})"
        stored = stored_probabilities(self.program, group, self.uses)
        if stored:  # (the arena's rows of the block: ldp is the row length there)
            body.append(f"{ptype} *const lm_p = {self.pointer(p_buf)} + ({idx(flat_at(zero) * NK)}) + lm_m0 * "
                        f"({idx(NK)});")
        else:
            body.append(f"{ptype} *const lm_p = ({ptype} *)lm_row_scratch({SLOT_P}, {p_bytes}, NULL);")
        body.append("int lm_ok = lm_s && lm_p;")
        body += [f"lm_ok = lm_ok && lm_row_scratch({k}, lm_nkv * (long long)sizeof({ctype}), NULL);"
                 for k in range(len(locals_))]
        body += ["if (!lm_ok) {", "    #pragma omp atomic write", f"    err = {SCRATCH_ERROR};", "    continue;", "}"]
        body.append(f"int lm_e = {self._gemm_name(g0i, g0)}(lm_m1 - lm_m0, lm_nkv, {idx(K)}, {self.pointer(g0.a)} + "
                    f"({idx(a_off)}) + lm_m0 * ({idx(av.strides[nb])}), {idx(av.strides[nb])}, "
                    f"{idx(av.strides[nb + 2])}, {self.pointer(g0.b)} + ({idx(b_off)}), {idx(bv.strides[nb + 1])}, "
                    f"{idx(bv.strides[nb + 2])}, lm_s, NULL, bufs, syms);")
        flat = flat_at(rvar)
        body.append(f"for (long long i{nb} = lm_m0; i{nb} < lm_m1; i{nb}++) {{")
        rows_text = [f"{ctype} *const lm_srow = lm_s + (i{nb} - lm_m0) * lm_nkv - ({idx(flat * NK)});"]
        if not stored:
            rows_text.append(f"{ptype} *const lm_prow = lm_p + (i{nb} - lm_m0) * lm_nkv - ({idx(flat * NK)});")
        try:
            self.local_rows = {s_buf: "lm_srow"} if stored else {s_buf: "lm_srow", p_buf: "lm_prow"}
            rows_text += self._row_body(members, locals_, "lm_nkv", arena=False)(bvars + (rvar,), flat)
        finally:
            self.local_rows = {}
        if stored:  # the skipped keys' probabilities: 0 (what the unfused softmax stores there)
            rows_text += [f"if (lm_nkv < {idx(NK)}) memset({self.pointer(p_buf)} + ({idx(flat * NK)}) + lm_nkv, 0, "
                          f"({idx(NK)} - lm_nkv) * sizeof({ptype}));"]
        body += ["    " + x for x in rows_text] + ["}"]
        ldp = idx(NK) if stored else "lm_nkv"
        body.append(f"if (!lm_e) lm_e = {self._gemm_name(g1i, g1)}(lm_m1 - lm_m0, {idx(D)}, lm_nkv, lm_p, {ldp}, 1, "
                    f"{self.pointer(g1.b)} + ({idx(v_off)}), {idx(vv.strides[nb + 1])}, {idx(vv.strides[nb + 2])}, "
                    f"{self.pointer(g1.out)} + ({idx(o_off)}) + lm_m0 * ({idx(D)}), NULL, bufs, syms);")
        body += ["if (lm_e) {", "    #pragma omp atomic write", "    err = lm_e;", "}"]
        lines += [ind + x for x in body]
        for j in range(nb, -1, -1):
            lines.append(f"    {'    ' * j}}}")

    def _key_scan(self, members_i: list, s_buf: int, NK):
        """``(values, first, test, any_test)``: what decides which keys a block may skip (see
        :meth:`_visible_keys`): the values whose C ``test`` is true at a key in some row make it visible; a row
        where ``test`` holds nowhere sees the keys where ``any_test`` holds (None: no such fallback); ``first``: the
        C count before any (``NK`` keys in all). None when no key may be skipped."""
        scan = skip_values(self.program, members_i, s_buf, self.uses)
        if scan is None:
            return None
        values, softmax = scan
        # (a softmax sees at least one key: a row that sees none is NaN, as the reference; none without keys. A
        # mask value at or below MASK_FLOOR (finfo.min) hides its key from a row that sees a key above it: exp()
        # of their difference is 0 for scores below ~1e29; a NaN mask value is seen)
        return (values, f"LUMINAL_MIN(1, {self.index(NK)})", f"!(lm_r <= {MASK_FLOOR!r}f)", "lm_r != -INFINITY") \
            if softmax else (values, "0", "lm_r != 0", None)

    def _visible_keys(self, scan, bvars, rvar, NK) -> list[str]:
        """Statements setting ``lm_nkv``: the number of keys the block's rows ``[lm_m0, lm_m1)`` may see (see the
        module docstring): a softmax of ``c * S + R`` up to the last key with ``R > -inf`` in some row, other
        chains up to the last key where their :func:`zero_factor` is not 0 in some row; all keys when ``scan``
        (:meth:`_key_scan`) is None."""
        if scan is None:
            return [f"const long long lm_nkv = {self.index(NK)};"]
        rest, first, test, any_test = scan
        nb = len(bvars)
        jvar = Expression.symbol("j", NK - 1)
        w = KernelWriter(self, loop_var="j")
        values = [w.emit(t, bvars + (rvar, jvar)) for t in rest]
        out = [f"long long lm_nkv = {first};", f"for (long long i{nb} = lm_m0; i{nb} < lm_m1; i{nb}++) {{"]
        out += ["    " + x for x in w.hoisted]
        out += ["    long long lm_last = 0, lm_any = 0;", "    #pragma omp simd reduction(max:lm_last, lm_any)",
                f"    for (long long j = 0; j < {self.index(NK)}; j++) {{"]
        out += ["        " + x for x in w.lines]
        out += [f"        const float lm_r = {' + '.join(f'({v})' for v in values)};",
                f"        const long long lm_c = {test} ? j + 1 : 0;",
                "        lm_last = lm_c > lm_last ? lm_c : lm_last;"]
        if any_test is not None:  # a row that sees no key above the floor: every key it does not mask with -inf
            out += [f"        const long long lm_a = {any_test} ? j + 1 : 0;",
                    "        lm_any = lm_a > lm_any ? lm_a : lm_any;", "    }",
                    "    if (lm_last == 0) lm_last = lm_any;"]
        else:
            out.append("    }")
        out += ["    lm_nkv = LUMINAL_MAX(lm_nkv, lm_last);", "}"]
        return out

    def zero_operand(self, kernel, epilogue: str, packs: tuple):
        """``"a"`` / ``"b"``: the operand of the GEMM ``kernel`` (no epilogue, no fused prologue) that is a fused
        chain's stored probabilities (or ``dS``) where keys may be skipped, read with the keys along its free axis
        (contiguous) and the query rows along the contraction: :meth:`_trimmed_gemm` runs it. None otherwise."""
        if epilogue != "NULL" or packs != (None, None) or kernel.a_pro is not None or kernel.b_pro is not None:
            return None
        nb = len(kernel.dims) - 2
        if kernel.a in self.zero_padded and kernel.a_view.strides[nb] == 1:
            return "a"
        if kernel.b in self.zero_padded and kernel.b_view.strides[nb + 1] == 1:
            return "b"
        return None

    def _trimmed_gemm(self, i: int, kernel, side: str, lines: list) -> None:
        """The GEMM ``kernel`` in blocks of its free axis over operand ``side`` (:meth:`zero_operand`: the keys of
        ``dK = dS^T Q`` or of ``dV^T = dO^T P``), each block multiplying only the rows of the contraction (query
        rows) where that operand is not 0 in some column of the block: under a causal mask the rows before the
        block's first key, at the end of a padded sequence the whole block. The trimmed rows' terms are
        ``0 * x``, 0 for every finite ``x`` (the fused chain's caveat on NaN and inf inputs applies)."""
        dims, idx = kernel.dims, self.index
        nb = len(dims) - 2
        M, N = dims[-2], dims[-1]
        av, bv = kernel.a_view, kernel.b_view
        K = av.dims[-1]
        _, a_off, b_off, c_off, batch = gemm_offsets(kernel)
        sam, sak, sbn, sbk = (idx(x) for x in (av.strides[nb], av.strides[nb + 2], bv.strides[nb + 1],
                                               bv.strides[nb + 2]))
        a, b, c = (self.pointer(x) for x in (kernel.a, kernel.b, kernel.out))
        zbuf, F, zk = (kernel.a, M, sak) if side == "a" else (kernel.b, N, sbk)
        ztype = self.program.buffers[zbuf][1]
        nonzero = "(lm_r[f] & 0x7fff) != 0" if ztype == DType.bfloat16 else "lm_r[f] != 0"
        ctype = kernel.dtype.c_type
        lines.append("    const long long lm_t4 = 4 * (long long)omp_get_max_threads();")
        lines.append(f"    const long long lm_fb = LUMINAL_MAX(16, LUMINAL_MIN({TRIM_BLOCK}, "
                     f"({idx(batch * F)} + lm_t4 - 1) / lm_t4) / 16 * 16);")
        lines.append(f"    const long long lm_nblk = ({idx(F)} + lm_fb - 1) / lm_fb;")
        lines.append(f"    #pragma omp parallel for collapse({nb + 1}) schedule(dynamic, 1) "
                     f"if(({idx(batch * M * N * K)}) >= {PARALLEL_MACS})")
        for j, d in enumerate(dims[:nb]):
            lines.append(f"    {'    ' * j}for (long long i{j} = 0; i{j} < {idx(d)}; i{j}++) {{")
        lines.append(f"    {'    ' * nb}for (long long lm_b = 0; lm_b < lm_nblk; lm_b++) {{")
        z0 = f"{self.pointer(zbuf)} + ({idx(a_off if side == 'a' else b_off)}) + lm_f0"
        body = [f"const long long lm_f0 = lm_b * lm_fb, lm_nf = LUMINAL_MIN(lm_fb, {idx(F)} - lm_f0);",
                f"long long lm_k0 = 0, lm_k1 = {idx(K)};"]
        for step, at in (("lm_k0++", "lm_k0"), ("lm_k1--", "lm_k1 - 1")):
            body += [f"for (; lm_k0 < lm_k1; {step}) {{",
                     f"    const {ztype.c_type} *const lm_r = {z0} + ({at}) * ({zk});",
                     "    int lm_nz = 0;", "    #pragma omp simd reduction(|:lm_nz)",
                     f"    for (long long f = 0; f < lm_nf; f++) lm_nz |= {nonzero};", "    if (lm_nz) break;", "}"]
        name = self._gemm_name(i, kernel)
        if side == "a":
            body += ["int lm_e = 0;", "if (lm_k1 == lm_k0) {",
                     f"    memset({c} + ({idx(c_off)}) + lm_f0 * ({idx(N)}), 0, lm_nf * ({idx(N)}) * sizeof({ctype}));",
                     "} else {",
                     f"    lm_e = {name}(lm_nf, {idx(N)}, lm_k1 - lm_k0, "
                     f"{a} + ({idx(a_off)}) + lm_f0 + lm_k0 * ({sak}), {sam}, {sak}, "
                     f"{b} + ({idx(b_off)}) + lm_k0 * ({sbk}), {sbn}, {sbk}, "
                     f"{c} + ({idx(c_off)}) + lm_f0 * ({idx(N)}), NULL, bufs, syms);", "}"]
        else:  # (the block is a band of C's columns: multiplied into scratch, then copied there)
            body += [f"{ctype} *const lm_c = lm_k1 > lm_k0 ? ({ctype} *)lm_row_scratch({SLOT_S}, ({idx(M)}) * lm_nf * "
                     f"(long long)sizeof({ctype}), NULL) : NULL;",
                     "int lm_e = lm_k1 > lm_k0 && !lm_c ? " + str(SCRATCH_ERROR) + " : 0;",
                     "if (lm_c) {",
                     f"    lm_e = {name}({idx(M)}, lm_nf, lm_k1 - lm_k0, "
                     f"{a} + ({idx(a_off)}) + lm_k0 * ({sak}), {sam}, {sak}, "
                     f"{b} + ({idx(b_off)}) + lm_f0 + lm_k0 * ({sbk}), {sbn}, {sbk}, lm_c, NULL, bufs, syms);",
                     "}",
                     f"for (long long m = 0; m < {idx(M)} && !lm_e; m++) {{",
                     f"    {ctype} *const lm_o = {c} + ({idx(c_off)}) + m * ({idx(N)}) + lm_f0;",
                     "    if (lm_c) memcpy(lm_o, lm_c + m * lm_nf, lm_nf * sizeof(lm_o[0]));",
                     "    else memset(lm_o, 0, lm_nf * sizeof(lm_o[0]));", "}"]
        body += ["if (lm_e) {", "    #pragma omp atomic write", "    err = lm_e;", "}"]
        lines += ["    " * (nb + 2) + x for x in body]
        for j in range(nb, -1, -1):
            lines.append(f"    {'    ' * j}}}")
