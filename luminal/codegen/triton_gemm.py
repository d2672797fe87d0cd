"""GEMM kernels of the Triton renderer (:class:`luminal.codegen.triton.TritonRenderer` inherits
:class:`GemmRendering`): ``C[b] = A[b] . B[b]^T`` on output tiles, operands read through their strided views.

* float32: ``tl.dot`` with ``input_precision="ieee"`` (no TF32: results match the reference to float32 rounding);
* float64: a broadcast multiply and ``tl.sum`` (no float64 ``tl.dot``);
* autocast's GEMMs (:func:`luminal.codegen.gemm_lowp.narrow_operands`): when both operands are bfloat16 values
  (stored as bfloat16 bits, or float32 read rounded) or both float16, ``tl.dot`` on the low type with float32
  accumulation, i.e. tensor cores on ``cuda`` (wgmma on Hopper); Triton's interpreter does not convert to
  bfloat16 correctly, so there bfloat16 values go through the float32 product (the same values, exact products).
"""

from __future__ import annotations

from ..dtype import DType
from ..shape import Expression, to_expr
from .kernel import GemmKernel
from .triton_support import TL_TYPE

GEMM_BLOCKS = (64, 64, 32)  # BLOCK_M, BLOCK_N, BLOCK_K of a float32 GEMM (tl.dot needs >= 16 each)
GEMM_BLOCKS_F64 = (32, 32, 8)
# a GEMM on tensor cores (both operands bfloat16 or both float16 values): tiles, warps, stages of its default
GEMM_BLOCKS_LOWP = (128, 128, 64, 8, 3)
GROUP_M = 8  # rows of output tiles visited together (L2 reuse); see GemmRendering._gemm


class GemmRendering:
    """The GEMM part of the renderer (needs the renderer's ``program``, ``interpret``, ``ex``, ``pointer``,
    ``_header``, ``_unravel`` and ``_numel``)."""

    def _operand_kind(self, buffer: int, rounded) -> str:
        """What a GEMM operand's values are: ``"bfloat16"`` (a bfloat16 buffer, or a float32 one read rounded to
        bfloat16: :func:`luminal.codegen.gemm_lowp.narrow_operands`), ``"float16"``, or its buffer's dtype."""
        if rounded == DType.bfloat16:
            return "bfloat16"
        return self.program.buffers[buffer][1].value

    @staticmethod
    def _rounded(kernel: GemmKernel, side: str) -> bool:
        return getattr(kernel, side + "_round") == DType.bfloat16

    def _low_operand(self, x: str, kind: str, rounded: bool, tensor: bool, ptr: str, ind: str):
        """How a loaded operand tile ``x`` (pointer text ``ptr``, values of ``kind``, ``rounded``: a float32 buffer
        read rounded to bfloat16) becomes what its ``tl.dot`` multiplies (``tensor``: the low type, on tensor
        cores; else float32 values): ``(pointer to load through, a statement before the loop or None, one after
        the load or None)``."""
        if kind == "bfloat16" and tensor and not rounded:
            # the stored bits are the operand: read through a bfloat16 pointer, so the tile goes from global
            # to shared memory and into the tensor cores as loaded (a bitcast of the loaded bits made Triton
            # copy every B tile through registers back into shared memory and wait for each MMA)
            return f"lm_p{x}", f"    lm_p{x} = {ptr}.to(tl.pointer_type(tl.bfloat16))", None
        if kind == "bfloat16" and tensor:  # float32 read rounded
            return ptr, None, f"{ind}{x} = _lm_bf16r({x}).to(tl.bfloat16)"
        if kind == "bfloat16":  # stored bits or float32 rounded to bfloat16 (autocast's operand), as float32
            return ptr, None, f"{ind}{x} = {'_lm_bf16r' if rounded else '_lm_bf16_load'}({x})"
        if kind == "float16" and not tensor:
            return ptr, None, f"{ind}{x} = {x}.to(tl.float32)"
        return ptr, None, None

    def _store_product(self, kernel, epilogue, acc: str, rows: str, cols: str, n: str, shape: str) -> list[str]:
        """The statements storing the output tile ``acc`` of ``kernel`` (a product with ``M`` rows per batch index
        ``bidx`` and ``n`` columns; ``rows``/``cols``: the tile's index blocks) unless only its ``epilogue`` reads
        it, and computing and storing the epilogue (``(kernel, value, vars, store_product)``, see :meth:`_gemm`;
        or None)."""
        from .triton import BodyWriter
        lines = []
        if epilogue is None or epilogue[3]:
            lines.append(f"    tl.store({self.pointer(kernel.out)} + bidx * M * {n} + {rows} * {n} + {cols}, {acc}, "
                         f"mask=({rows} < M) & ({cols} < {n}))")
        if epilogue is None:
            return lines
        epi, value, vars_, _ = epilogue
        lines += [f"    # epilogue -> buffer {epi.out}",
                  f"    cmask = ({rows} < M) & ({cols} < {n})",
                  f"    zt = tl.zeros({shape}, tl.int64)",
                  f"    i0 = bidx * M + {rows}",  # the product's row over all batches
                  f"    i1 = {cols}"]
        w = BodyWriter(self, shape, live="cmask", zi="zt")
        w.substitute = {kernel.out: acc}  # the product at the element's own index: the accumulator
        result = w.emit(value, vars_)
        lines += w.lines
        lines.append(self._store(epi, f"{result}.to({TL_TYPE[epi.dtype]})" if epi.dtype != DType.bool else result,
                                 f"i0 * {n} + {cols}", "cmask"))
        return lines

    def _gemm(self, k: int, kernel: GemmKernel, epilogue=None):
        """The GEMM kernel's source and launch. ``epilogue``: ``(kernel, value, vars, store_product)`` of the
        elementwise kernel after the GEMM that reads the product only at its own element
        (:func:`luminal.codegen.groups.epilogue_value`: a bias, an activation, autocast's rounding): it is
        computed on the accumulator tile before it leaves the registers and stored; the product itself is stored
        only when ``store_product`` (another kernel or the host reads it)."""
        from .triton import Launch
        dtype = kernel.dtype
        if dtype not in (DType.float32, DType.float64):
            raise NotImplementedError(f"Triton backend: GEMM in {dtype}")
        nb = len(kernel.dims) - 2
        lines, buffers, syms = self._header(k, kernel, ["n_batch", "M", "N", "K"], ["BLOCK_M", "BLOCK_N", "BLOCK_K"],
                                            also=() if epilogue is None else (epilogue[0],))
        M, N = kernel.dims[nb], kernel.dims[nb + 1]
        K = kernel.a_view.dims[nb + 2]
        batch = self._numel(kernel.dims[:nb])
        lines += self._constant_sizes({"n_batch": batch, "M": M, "N": N, "K": K}, syms)
        lines += ["    pid = tl.program_id(0).to(tl.int64)",
                  "    tiles_m = tl.cdiv(M, BLOCK_M)",
                  "    tiles_n = tl.cdiv(N, BLOCK_N)",
                  "    bidx = pid // (tiles_m * tiles_n)",
                  "    tile = pid % (tiles_m * tiles_n)",
                  # tiles in groups of GROUP_M rows of tiles, column by column within a group: programs running
                  # at the same time share A's row panels and B's column panels in L2 (row-major tile order
                  # streams all of B for every row of tiles)
                  f"    in_group = {GROUP_M} * tiles_n",
                  f"    first_m = (tile // in_group) * {GROUP_M}",
                  f"    group_m = tl.minimum(tiles_m - first_m, {GROUP_M})",
                  "    m = (first_m + (tile % in_group) % group_m) * BLOCK_M + tl.arange(0, BLOCK_M)",
                  "    n = ((tile % in_group) // group_m) * BLOCK_N + tl.arange(0, BLOCK_N)"]
        unravel, bvars = self._unravel(kernel.dims[:nb], "bidx", "lm_j")
        lines += unravel
        mv, nv, kv = (Expression.symbol(s, d - 1) for s, d in (("lm_am", M), ("lm_bn", N), ("lm_kk", K)))
        a_off, a_valid = kernel.a_view.axis_expressions(bvars + (mv, to_expr(0), kv))
        b_off, b_valid = kernel.b_view.axis_expressions(bvars + (to_expr(0), nv, kv))
        ind = "        "
        # an offset that depends on both tile axes has the tile's shape already; else zeros broadcast it (adding
        # them to a full offset would hide its contiguity from Triton's analysis)
        a_zi = not {"lm_am", "lm_kk"} <= set(a_off.symbols())
        b_zi = not {"lm_bn", "lm_kk"} <= set(b_off.symbols())
        kinds = (self._operand_kind(kernel.a, kernel.a_round), self._operand_kind(kernel.b, kernel.b_round))
        low = kinds[0] if kinds[0] == kinds[1] and kinds[0] in ("bfloat16", "float16") else None
        tensor_bf16 = low == "bfloat16" and not self.interpret
        loads, ptr = [], {"a": self.pointer(kernel.a), "b": self.pointer(kernel.b)}
        for side, kind in zip("ab", kinds):
            ptr[side], setup, convert = self._low_operand(side, kind, self._rounded(kernel, side),
                                                          low is not None and (low == "float16" or tensor_bf16),
                                                          ptr[side], ind)
            lines += [setup] if setup else []
            loads += [convert] if convert else []
        lines += ["    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)" if dtype == DType.float32 else
                  "    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float64)",
                  "    for k0 in range(0, K, BLOCK_K):",
                  f"{ind}# A tile [BLOCK_M, BLOCK_K]",
                  f"{ind}lm_am = m[:, None]",
                  f"{ind}lm_kk = k0 + tl.arange(0, BLOCK_K)[None, :]",
                  *([f"{ind}zi = tl.zeros([BLOCK_M, BLOCK_K], tl.int64)"] if a_zi else []),
                  f"{ind}amask = (lm_am < M) & (lm_kk < K)" + ("" if a_valid == 1 else f" & {self.ex.bool_(a_valid)}"),
                  f"{ind}a = tl.load({ptr['a']} + ({self.ex.int_(a_off)}{' + zi' if a_zi else ''}), mask=amask, other=0)",
                  f"{ind}# B tile [BLOCK_K, BLOCK_N]",
                  f"{ind}lm_bn = n[None, :]",
                  f"{ind}lm_kk = k0 + tl.arange(0, BLOCK_K)[:, None]",
                  *([f"{ind}zi = tl.zeros([BLOCK_K, BLOCK_N], tl.int64)"] if b_zi else []),
                  f"{ind}bmask = (lm_bn < N) & (lm_kk < K)" + ("" if b_valid == 1 else f" & {self.ex.bool_(b_valid)}"),
                  f"{ind}b = tl.load({ptr['b']} + ({self.ex.int_(b_off)}{' + zi' if b_zi else ''}), mask=bmask, other=0)"]
        lines += loads
        if tensor_bf16 or low == "float16":
            # tensor cores: the products of bfloat16 / float16 values are exact, summed in float32 (the reference's
            # float32 GEMM over the same values, up to the order of the sum). Triton's interpreter does not
            # convert to bfloat16 correctly, so there bfloat16 values go through the float32 product below.
            lines.append(f"{ind}acc = tl.dot(a, b, acc)")
        elif dtype == DType.float32:
            lines.append(f'{ind}acc = tl.dot(a, b, acc, input_precision="ieee")')
        else:
            lines.append(f"{ind}acc = acc + tl.sum(a[:, :, None] * b[None, :, :], axis=1)")
        lines += ["    cm = m[:, None]",
                  "    cn = n[None, :]"]
        lines += self._store_product(kernel, epilogue, "acc", "cm", "cn", "N", "[BLOCK_M, BLOCK_N]")
        bm, bn, bk = GEMM_BLOCKS if dtype == DType.float32 else GEMM_BLOCKS_F64
        constexprs = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}
        if low is not None:
            bm, bn, bk, warps, stages = GEMM_BLOCKS_LOWP
            constexprs = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": warps, "num_stages": stages}
        # programs: batch * ceil(M / BM) * ceil(N / BN), expressed as (count, 1)
        tiles = batch * ((M + (bm - 1)) // bm) * ((N + (bn - 1)) // bn)
        launch = Launch(f"kernel_{k}", "gemm", buffers, syms, [batch, M, N, K], constexprs, (tiles, 1), kernel.out)
        return "\n".join(lines), launch
