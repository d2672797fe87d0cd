"""Fused attention of the Triton renderer (:class:`luminal.codegen.triton.TritonRenderer` inherits
:class:`AttentionRendering`): ``softmax(f(Q K^T)) V`` as one kernel in the online-softmax form.

The kernel IR of attention is a GEMM for the scores ``S``, a row group computing the softmax of ``f(S)`` (``f``:
the elementwise scale, mask, bias: any value tree that reads ``S`` at its own element) and a GEMM of the
probabilities with ``V``. :func:`find_attention` recognizes that chain when nothing else reads ``S``, the
probabilities or the softmax's statistics (inference: a training step's backward reads the probabilities, and the
chain then runs as it is). The fused kernel gives each program ``BLOCK_M`` query rows of one batch index and walks
the keys in blocks of ``BLOCK_N``: the block's scores (``tl.dot``), ``f`` on them, and FlashAttention's running
maximum, rescaled sum and rescaled output accumulator; ``S`` and the probabilities are never stored. Against the
reference (maximum, ``exp2((f - max) * log2 e)``, sum, reciprocal, product, GEMM) the values differ by rounding
only: the exponentials are taken against the running maximum and rescaled by ``exp2((m_old - m_new) * log2 e)``,
and the output is normalized after the product. A row whose every score is ``-inf`` (masked) gives NaN, and a NaN
score makes its row NaN, as in the reference.

Autocast (bfloat16 or float16): ``Q``, ``K`` and ``V`` may be low-precision values (stored so, or float32 read
rounded to bfloat16), the probabilities may be rounded to the low type before the second product (autocast's
``P @ V``), and the output may go through an epilogue (autocast's rounding of the result, the heads' transpose
back). Where both operands of a product are values of one low type, it multiplies tiles of that type with float32
accumulation (tensor cores), as the GEMM kernels do. The rounding of the probabilities moves: the reference rounds
the normalized ``e * r``, the kernel the exponentials against the running maximum (normalized after the product,
in float32), as FlashAttention does; each term is within one rounding of the reference's either way.
"""

from __future__ import annotations

from ..dtype import DType
from ..shape import Expression, ShapeTracker, to_expr
from .kernel import Compute, ConstValue, ElementwiseKernel, GemmKernel, Load, ReduceKernel
from .triton_support import _pow2
from .values import walk

ATTENTION_BLOCKS = (64, 64)  # BLOCK_M (query rows per program), BLOCK_N (keys per step)
LOG2E = 1.4426950408889634


def _is_load(v, buffer: int) -> bool:
    return isinstance(v, Load) and v.buffer == buffer


def _op(v, name: str, n: int) -> bool:
    return isinstance(v, Compute) and type(v.op).__name__ == name and len(v.args) == n


def _const(v, value: float) -> bool:
    return isinstance(v, ConstValue) and not isinstance(v.value, Expression) and float(v.value) == value


def _plain_view(view: ShapeTracker, dims) -> bool:
    """``view`` reads a buffer of ``dims`` row-major, whole, at the iteration space's own index."""
    return view == ShapeTracker.contiguous_of(dims)


LOW = (DType.bfloat16, DType.float16)


def _probabilities(pr):
    """``(e * r, low)``: the value of the softmax's last member ``pr`` without autocast's rounding of the
    probabilities when it has one, and the low-precision type the probabilities are in (else None)."""
    v = pr.value
    if pr.dtype in LOW and _op(v, "Cast", 1) and v.op.dtype == pr.dtype:
        v = v.args[0]
    return v, pr.dtype if pr.dtype in LOW else None


def _softmax_members(members) -> bool:
    """The row group is a softmax of some ``f``: ``m = max f``; ``n = m * -1``; ``e = exp2((f + n) * log2 e)``;
    ``s = sum e``; ``r = 1 / s``; ``p = e * r`` (luminal's ``softmax``, as lowered; ``p`` possibly rounded to a
    low-precision type: autocast), with ``e`` a kernel of its own (6 members) or computed inside the sum and the
    product (5 members). The statistics are float32 (a softmax computed in float16, as float16 autocast keeps a
    float16 tensor's softmax, as torch on the CPU, stays unfused)."""
    if (len(members) not in (5, 6) or any(m.dtype != DType.float32 for m in members[:-1])
            or members[-1].dtype not in (DType.float32, *LOW)):
        return False
    mx, neg, *rest = members
    six = len(members) == 6
    ex, sm, rc, pr = rest if six else (None, *rest)
    if not (isinstance(mx, ReduceKernel) and mx.kind == "max" and isinstance(sm, ReduceKernel) and sm.kind == "sum"
            and all(isinstance(k, ElementwiseKernel) for k in (neg, rc, pr) + ((ex,) if six else ()))):
        return False
    if not (_op(neg.value, "Mul", 2) and _is_load(neg.value.args[0], mx.out) and _const(neg.value.args[1], -1.0)):
        return False

    def is_exp(v):  # exp2((f + n) * log2 e), f the maximum's own operand
        if not (_op(v, "Exp2", 1) and _op(v.args[0], "Mul", 2) and _const(v.args[0].args[1], LOG2E)):
            return False
        inner = v.args[0].args[0]
        return _op(inner, "Add", 2) and inner.args[0] == mx.value and _is_load(inner.args[1], neg.out)

    if six:
        if not (is_exp(ex.value) and _is_load(sm.value, ex.out) and _plain_view(sm.value.view, ex.dims)):
            return False
        exp_of = lambda v: _is_load(v, ex.out) and _plain_view(v.view, ex.dims)  # noqa: E731
    else:
        if not is_exp(sm.value):
            return False
        exp_of = lambda v: v == sm.value  # noqa: E731
    if not (_op(rc.value, "Recip", 1) and _is_load(rc.value.args[0], sm.out)):
        return False
    product = _probabilities(pr)[0]
    a, b = product.args if _op(product, "Mul", 2) else (None, None)
    if not ((exp_of(a) and _is_load(b, rc.out)) or (exp_of(b) and _is_load(a, rc.out))):
        return False
    return tuple(pr.dims) == tuple(mx.dims) + (mx.extent,)


def _reads_only_own(value, buffer: int, dims) -> bool:
    """``value`` reads ``buffer``, and only plainly at the value's own index (not remapped, not gathered)."""
    every = [v for v in walk(value) if isinstance(v, Load) and v.buffer == buffer]
    own = [v for v in walk(value, inlined=False) if isinstance(v, Load) and v.buffer == buffer]
    return bool(own) and len(own) == len(every) and all(_plain_view(v.view, dims) for v in own)


def operand_kind(program, buffer: int, rounded):
    """What the fused kernel multiplies for an operand: ``"bfloat16"`` (bfloat16 bits, or float32 read rounded),
    ``"float16"``, ``"float32"``, or None (a type it does not take)."""
    if rounded is not None:
        return "bfloat16" if rounded == DType.bfloat16 else None
    dtype = program.buffers[buffer][1]
    return dtype.value if dtype in (DType.float32, *LOW) else None


def find_attention(program, groups, readers: dict, pinned: set, epilogues: dict,
                   shared_probabilities: bool = False, any_rows: bool = False) -> dict:
    """``{index of the P.V GEMM: (index of the Q.K^T GEMM, row group indices)}`` for every attention chain the
    fused kernel computes (see the module docstring for the conditions; the P.V GEMM may have an epilogue).
    ``shared_probabilities``: the probabilities may also be read by other kernels (a training step's backward)
    or be an output (the attention weights); the P.V GEMM is then the first GEMM reading them plainly (the C
    renderer's fused kernel stores them, and runs before their first reader). ``any_rows``: the row group need
    not be a softmax (the C renderer fuses any GEMM, row group, GEMM chain of this shape: attention's backward,
    ``dS = P (dP - sum(dP P))``)."""
    kernels = program.kernels
    writer = {k.out: i for i, k in enumerate(kernels)}
    found = {}
    for group in groups:
        members = [kernels[i] for i in group]
        if not isinstance(members[0], ReduceKernel) or not (any_rows or _softmax_members(members)):
            continue
        mx, pr = members[0], members[-1]
        rows, extent = tuple(mx.dims), mx.extent
        space = rows + (extent,)
        scores = {v.buffer for v in walk(mx.value) if isinstance(v, Load) and writer.get(v.buffer, len(kernels))
                  < group[0] and isinstance(kernels[writer[v.buffer]], GemmKernel)}
        if len(scores) != 1:
            continue
        (s_buf,) = scores
        g0i = writer[s_buf]
        g0 = kernels[g0i]
        if (g0.dtype != DType.float32 or tuple(g0.dims) != space or g0.a is None or g0.b is None
                or None in (operand_kind(program, g0.a, g0.a_round), operand_kind(program, g0.b, g0.b_round))
                or g0i in epilogues
                or s_buf in pinned or not set(readers.get(s_buf, ())) <= set(group)
                or not all(_reads_only_own(kernels[i].value, s_buf, space)
                           for i in set(readers.get(s_buf, ())))):
            continue
        p_readers = readers.get(pr.out, ())
        nb = len(rows) - 1

        def plain(g):  # P is the left operand read plainly: (batch..., M, D, K), stride 0 on D, P's strides else
            return g.a == pr.out and g.a_view == ShapeTracker.contiguous_of(space).unsqueeze(nb + 1).expand(
                nb + 1, g.dims[-1])
        if shared_probabilities:
            gemms = [i for i in sorted(p_readers) if isinstance(kernels[i], GemmKernel) and plain(kernels[i])]
            if not gemms:
                continue
            g1i = gemms[0]
        elif len(p_readers) != 1 or pr.out in pinned:
            continue
        else:
            g1i = p_readers[0]
        g1 = kernels[g1i]
        inside = set(group) | {g1i}
        if (not isinstance(g1, GemmKernel) or g1.dtype != DType.float32 or g1.a != pr.out or g1.b is None
                or g1.b == pr.out or operand_kind(program, g1.a, g1.a_round) is None
                or operand_kind(program, g1.b, g1.b_round) is None or g1i < group[-1] or tuple(g1.dims[:-1]) != rows):
            continue
        if not plain(g1) or to_expr(g1.a_view.dims[-1]) != to_expr(extent):
            continue
        # the softmax's statistics and the exponentials are read only inside the chain
        if any(m.out in pinned or not set(readers.get(m.out, ())) <= inside for m in members[:-1]):
            continue
        if not to_expr(g1.dims[-1]).is_constant() or to_expr(g1.dims[-1]).to_int() > 256:
            continue  # the output row (head dim) is held in registers
        found[g1i] = (g0i, list(group))
    return found


class AttentionRendering:
    """The fused attention kernel (needs the renderer's ``program``, ``ex``, ``pointer``, ``_header``,
    ``_unravel``, ``_numel`` and ``_constant_sizes``)."""

    def _operand_load(self, name: str, view, vars_, shape: str, axes: set, ind: str) -> list[str]:
        """Load a ``shape`` tile of operand ``name`` (``q``, ``k``, ``v``) through ``view`` at ``vars_``; ``axes``:
        the names of the tile's two index variables (an offset over both has the tile's shape already; zeros
        broadcast any other, as in the GEMM kernel)."""
        off, valid = view.axis_expressions(vars_)
        mask = f"{name}mask"
        zeros = "" if axes <= set(off.symbols()) else f" + tl.zeros({shape}, tl.int64)"
        lines = [f"{ind}{mask} = {self._attention_live[name]}" + ("" if valid == 1 else f" & {self.ex.bool_(valid)}")]
        lines.append(f"{ind}{name} = tl.load({self._attention_ptr[name]} + ({self.ex.int_(off)}{zeros}), "
                     f"mask={mask}, other=0)")
        return lines

    def _attention(self, k: int, g0: GemmKernel, members: list, g1: GemmKernel, epilogue=None):
        """Source and launch of the fused attention kernel replacing ``g0`` (scores), the softmax row group
        ``members`` and ``g1`` (probabilities times values) and ``epilogue`` (``(kernel, value, vars,
        store_product)`` as for a GEMM, or None); see the module docstring."""
        from .triton import BodyWriter, Launch
        mx = members[0]
        rows = tuple(mx.dims)
        nb = len(rows) - 1
        M, NK, D = rows[-1], to_expr(mx.extent), to_expr(g1.dims[-1])
        K = g0.a_view.dims[nb + 2]
        batch = self._numel(rows[:nb])
        lines, buffers, syms = self._header(k, g1, ["n_batch", "M", "NK", "K", "D"],
                                            ["BLOCK_M", "BLOCK_N", "BLOCK_K", "BLOCK_D"],
                                            also=(g0, *members) + (() if epilogue is None else (epilogue[0],)))
        lines[2] = f"    # attention -> buffer {g1.out}: softmax(f(scores)) @ values, online (scores {g0.out})"
        lines += self._constant_sizes({"n_batch": batch, "M": M, "NK": NK, "K": K, "D": D}, syms)
        lines += ["    pid = tl.program_id(0).to(tl.int64)",
                  "    tiles_m = tl.cdiv(M, BLOCK_M)",
                  "    bidx = pid // tiles_m",
                  "    m = (pid % tiles_m) * BLOCK_M + tl.arange(0, BLOCK_M)",
                  "    lm_qi = m[:, None]",
                  "    row_live = lm_qi < M",
                  "    lm_vd = tl.arange(0, BLOCK_D)[None, :]",
                  "    m_i = tl.full([BLOCK_M, 1], float(\"-inf\"), tl.float32)",
                  "    l_i = tl.zeros([BLOCK_M, 1], tl.float32)",
                  "    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)"]
        unravel, bvars = self._unravel(rows[:nb], "bidx", "lm_j")
        lines += unravel
        qi, kj = Expression.symbol("lm_qi", M - 1), Expression.symbol("lm_kj", NK - 1)
        am, kk, bn = (Expression.symbol(s, d - 1) for s, d in (("lm_am", M), ("lm_kk", K), ("lm_bn", NK)))
        vj, vd = Expression.symbol("lm_vj", NK - 1), Expression.symbol("lm_vd", D - 1)
        ind, ind2 = "        ", "            "
        # what each product multiplies: tiles of a low type on tensor cores (both operands values of that type;
        # bfloat16 not in Triton's interpreter, which does not convert to it correctly), else float32 values
        kinds = {"q": operand_kind(self.program, g0.a, g0.a_round), "k": operand_kind(self.program, g0.b, g0.b_round),
                 "v": operand_kind(self.program, g1.b, g1.b_round)}
        p_low = _probabilities(members[-1])[1] or (DType.bfloat16 if g1.a_round == DType.bfloat16 else None)

        def tensor(a: str, b: str) -> bool:
            return a == b and (a == "float16" or (a == "bfloat16" and not self.interpret))
        tensor_s = tensor(kinds["q"], kinds["k"])
        tensor_o = p_low is not None and tensor(p_low.value, kinds["v"])
        self._attention_ptr, convert = {}, {}
        for name, buf, rounded, cores in (("q", g0.a, g0.a_round, tensor_s), ("k", g0.b, g0.b_round, tensor_s),
                                          ("v", g1.b, g1.b_round, tensor_o)):
            self._attention_ptr[name], setup, convert[name] = self._low_operand(
                name, kinds[name], rounded == DType.bfloat16, cores, self.pointer(buf), ind2 if name != "v" else ind)
            lines += [setup] if setup else []
        self._attention_live = {"q": "row_live & (lm_kk < K)", "k": "(lm_bn < NK) & (lm_kk < K)",
                                "v": "(lm_vj < NK) & (lm_vd < D)"}
        lines += ["    for n0 in range(0, NK, BLOCK_N):",
                  f"{ind}n = n0 + tl.arange(0, BLOCK_N)",
                  f"{ind}s = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)",
                  f"{ind}for k0 in range(0, K, BLOCK_K):",
                  f"{ind2}lm_am = lm_qi",
                  f"{ind2}lm_kk = k0 + tl.arange(0, BLOCK_K)[None, :]"]
        lines += self._operand_load("q", g0.a_view, bvars + (am, to_expr(0), kk), "[BLOCK_M, BLOCK_K]",
                                    {"lm_am", "lm_kk"}, ind2)
        lines += [convert["q"]] if convert["q"] else []
        lines += [f"{ind2}lm_bn = n[None, :]", f"{ind2}lm_kk = k0 + tl.arange(0, BLOCK_K)[:, None]"]
        lines += self._operand_load("k", g0.b_view, bvars + (to_expr(0), bn, kk), "[BLOCK_K, BLOCK_N]",
                                    {"lm_bn", "lm_kk"}, ind2)
        lines += [convert["k"]] if convert["k"] else []
        lines += [f"{ind2}s = tl.dot(q, k, s)" if tensor_s else f'{ind2}s = tl.dot(q, k, s, input_precision="ieee")',
                  f"{ind}lm_kj = n[None, :]",
                  f"{ind}live = row_live & (lm_kj < NK)",
                  f"{ind}zi = tl.zeros([BLOCK_M, BLOCK_N], tl.int64)"]
        # f: the maximum's operand (scale, mask, bias) on the block's scores, the scores from registers
        w = BodyWriter(self, "[BLOCK_M, BLOCK_N]", indent=ind)
        w.substitute = {g0.out: "s"}
        f = w.emit(mx.value, bvars + (qi, kj))
        lines += w.lines
        lines += [f'{ind}f = tl.where(live, {f}.to(tl.float32), float("-inf"))',
                  f"{ind}bmax = tl.max(f, axis=1)[:, None]",
                  f'{ind}bmax = tl.where(tl.max((f != f).to(tl.int32), axis=1)[:, None] > 0, float("nan"), bmax)',
                  f"{ind}m_new = _lm_max(m_i, bmax)",
                  # an all -inf row so far: exponentials against 0 (they are 0); the reference's -inf - -inf = NaN
                  # comes back at the end from 0 / 0
                  f'{ind}m_use = tl.where(m_new == float("-inf"), 0.0, m_new)',
                  f"{ind}p = tl.exp2((f + (-m_use)) * {LOG2E})",
                  f"{ind}alpha = tl.exp2((m_i + (-m_use)) * {LOG2E})",
                  f"{ind}l_i = l_i * alpha + tl.sum(p, axis=1)[:, None]",
                  f"{ind}lm_vj = n[:, None]"]
        lines += self._operand_load("v", g1.b_view, bvars + (to_expr(0), vd, vj), "[BLOCK_N, BLOCK_D]",
                                    {"lm_vd", "lm_vj"}, ind)
        lines += [convert["v"]] if convert["v"] else []
        # autocast's low-precision probabilities (here: the exponentials, normalized after the product)
        if p_low == DType.bfloat16:
            lines.append(f"{ind}p = _lm_bf16r(p)" + (".to(tl.bfloat16)" if tensor_o else ""))
        elif p_low == DType.float16:
            lines.append(f"{ind}p = p.to(tl.float16)" + ("" if tensor_o else ".to(tl.float32)"))
        dot = "tl.dot(p, v)" if tensor_o else 'tl.dot(p, v, input_precision="ieee")'
        lines += [f"{ind}acc = acc * alpha + {dot}",
                  f"{ind}m_i = m_new",
                  "    o = acc * (1.0 / l_i)"]
        lines += self._store_product(g1, epilogue, "o", "lm_qi", "lm_vd", "D", "[BLOCK_M, BLOCK_D]")
        bm, bn = ATTENTION_BLOCKS
        kc, dc = to_expr(K).to_int(), D.to_int()
        bk = max(16, min(_pow2(kc), 64)) if kc is not None else 32
        bd = max(16, _pow2(dc))
        if bd > 128:  # the output rows' accumulator: 64 x 256 floats would spill registers
            bm //= 2
        constexprs = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "BLOCK_D": bd}
        tiles = batch * ((M + (bm - 1)) // bm)
        launch = Launch(f"kernel_{k}", "attention", buffers, syms, [batch, M, NK, K, D], constexprs, (tiles, 1),
                        g1.out)
        return "\n".join(lines), launch


__all__ = ["find_attention", "operand_kind", "AttentionRendering", "ATTENTION_BLOCKS"]
