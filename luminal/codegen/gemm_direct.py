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

:func:`direct_plan` decides whether a GEMM qualifies and how its view maps onto the input's axes: an unbatched
GEMM (or a batch of them: a grouped convolution, one per group, all run by one call) one of whose operands is
a fused prologue that is a plain load (:func:`window_load`) of a buffer of the
GEMM's dtype, each index variable moving along one axis of that buffer (a positive step; the buffer's axes are
split where the view reads a flattened axis as two), each mask bounding exactly the axis its variables move along
(with the same coefficients) by its extent, every unmasked coordinate in range: then the view's offset is the
copy's, term by term. Three forms:

* *rows* (the window is B; a convolution's forward, and its input gradient, which nn.conv computes as a
  convolution where this applies): vectors along the output's innermost axis, as above; A is interleaved by
  its own prologue's pack callback when it has one (a transposed, flipped kernel).
* *dot* (a weight gradient, whose output runs along the kernel's width: 3 of a vector's 16 lanes): vectors along
  the sum (consecutive stretches of K; in the copy, along the input's rows), dot products of the other operand's
  rows (read in place, or computed into scratch by its pack callback) and the copy's, in 4 x 4 tiles (1 x 9,
  1 x 7 for a depthwise convolution's one row per group), their lanes added at the end; K in L1-sized chunks. A
  vector that crosses from one row into the next (rows of 24 = 16, then 8 + 8) loads both places in the copy
  and blends them by a lane mask, so every lane is in use for rows of at least ``VW - gcd(VW, rows)``.
* *cols* (the window is B; a convolution's forward where the output rows leave lanes idle: 7, 14, 20): vectors along
  the output channels (A's rows, interleaved), each window element broadcast, so no lane idles whatever the rows'
  length or stride (:func:`~.gemm_direct_loops.cols_loops`; ``LUMINAL_DIRECT_COLS=0`` turns it off).

A strided convolution reads every s-th element along the rows: the copy stores the innermost axis as s *phases*
(element c at ``(c % s, c // s)``), where those reads are contiguous again (for s = 2 each row is split into its
even and odd elements two vectors at a time, by shuffles: a stride-2 depthwise layer 1.50 -> 1.15 ms; an
unpadded strided row is not cut at the stride, which the kernel's taps run across). Where output rows are not whole
vectors (24 = 16 + 8), the rows form can run its vectors over whole *padded* rows of the copy, a plane of rows
(the next output axis) at a time: the positions past a row (its halo, 2 of 26) are computed and dropped when
stored (``DirectPlan.q2``). Of the forms that apply, the one that leaves the fewest lanes idle is taken: one with
none idle (rows a multiple of the vector; the dot form), a "rows" form with at least ``FULL`` of them in use, or
one with at most half of them idle and at most ``FEW`` rows of A (few output channels), or, with at most
``DEPTHWISE_ROWS`` rows of A (a depthwise layer), from ``DEPTHWISE_USE`` of them in use. (Measured on AVX-512,
one training step of a 3x3 convolution: 16 -> 32 channels on 32x32 images 2.8 ms direct vs 3.3 packed, 64 -> 64
on 16^3 volumes 19.6 vs 24.2, 32 -> 64 on 32x32 4.1 vs 4.2; but 64 -> 64 on 24x24 images, rows of 16 + 8 lanes,
8.8 vs 4.9, and a weight gradient's "dot" form over rows of 26 with a partial vector per row (8 -> 32 channels)
0.75 vs 0.58 ms, so those keep the pack. The dot form with vectors across rows: W4's conv2 weight gradient (rows of
24) 7.7-8.5 vs 8.2 ms packed (at par); a 7x7 depthwise convolution of 96 channels 2.8 vs 10.5 ms per step, where the pack
copies 49 times the input.)
:func:`render_direct` writes the C function (the loops of the three forms: :mod:`.gemm_direct_loops`), with the
fused own GEMM's signature (so the renderer calls it the same way); the prologue search (``search="quick"``)
times it as the fused plan, against the same GEMMs packed and the copy materialized. ``LUMINAL_DIRECT_CONV=0``
turns the path off.

Two more forms take 3x3 stride-1 layers from 16 channels (enough positions): ``"wino"``, Winograd F(2x2, 3x3) for
the forward and the input gradient (:mod:`.gemm_winograd`), and ``"winodw"``, F(3x3, 2x2) or F(3x3, 4x4) for the
weight gradient (:mod:`.gemm_winograd_dw`); ``LUMINAL_WINOGRAD=0`` turns them off.

A grouped convolution is a batched GEMM (batch = groups): the copy is made once, each batch element's window
starts at its group's channels, and the tiles of all of them are shared out over the threads together (a
depthwise convolution has one row of A per group: the rows form's tile is 1 x 8 vectors).

Sizes may be symbolic (``cx.tensor(("batch", C, H, W))``): the GEMM's N or K, the source's axes and strides, the
plain operand's batch strides. The plan proves what it needs for every binding from 1 up (a batch of 0 returns
before any index: an empty N or K), e.g. that a batch variable stays inside its axis (``batch - 1 < batch``) or
that a cut of ``(1, 8, 81*batch)`` into ``(8, batch, 9, 9)`` divides; the copy's size, its rows and the terms of a
batch coordinate are then C expressions of the run-time sizes. The innermost axis (where vectors run), the
view's offset and masks, the number of GEMMs and the other operand's rows stay constants.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from ..dtype import DType
from ..shape import to_expr
from .gemm_config import vector_bytes
from .sizes import _below, _c, _divides, _int, _least, _long, _prod, _size, same_size
from .gemm_winograd_dw import DIRECT_BUF, render_wino_dw, wino_dw_plan
from .gemm_winograd import wino_loops, wino_plan, wino_scratch, wino_tiles
from .gemm_direct_loops import (cols_loops, cols_scratch, cols_tile, dot_loops, dot_runs, rows_loops, split_two,
                                tile)
from .kernel import GemmKernel, Load, Program

MAX_PADDED = 1 << 26  # elements: a larger padded copy keeps the pack
FEW = 32  # rows of the other operand up to which a form with idle lanes is taken (measured: see the docstring)
FEW_ROWS_PAR = 16  # threads from LM_OWN_GEMM_PAR_MACS / this multiply-adds where A has 1-3 rows (see render_direct)
# with at most DEPTHWISE_ROWS rows of A (a depthwise layer's one per group) a rows form is taken from DEPTHWISE_USE of
# its lanes: the packed alternative is a batch of GEMMs of one row and K = 9 (MobileNet's stride-2 3x3 layers on
# small images, rows of 7 / 4: 192 channels 14 -> 7 at 117 us packed, 35 direct; 256 channels 9 -> 5 139 vs 29)
DEPTHWISE_ROWS, DEPTHWISE_USE = 2, 0.25
FULL = 0.85  # the share of lanes in use from which a form is taken with any number of rows
# the "cols" form from this many output positions (a symbolic batch at 1): fewer (a ResNet's last stages, 7 x 7 and
# 4 x 4 against 256-512 channels) stream A, whose pack then costs more than the packed GEMM's (ResNet-18 at 112 x 112,
# one 3x3 layer, batch 1: 49 positions 0.57 ms against 0.44, 16 1.60 against 0.80; batch 8: 2.47 / 2.82, 4.49 / 3.59)
COLS_POSITIONS = 96
# and from this K (a stem's 1-3 input channels x 3x3: its few multiply-adds per output do not pay for storing C
# transposed; W4's conv1 1 -> 32 on 28 x 28 0.71 ms cols, 0.44 rows; a 3 -> 32 stride-2 stem 0.53 / 0.42)
COLS_K = 32


@dataclass(frozen=True)
class DirectPlan:
    """How a fused B operand reads its buffer: ``src`` (buffer id) of ``dims``, padded by ``pads[a] = (lo, hi)``
    per axis; ``steps[d] = (axis, step)`` for each index variable ``d`` of the prologue that moves (its kernel
    axis longer than 1, its stride non-zero); ``origin[a]``: the coordinate on axis ``a`` when every variable is
    0 (before padding). ``q``: the prologue axis along which the kernel takes vectors (unit stride in the copy):
    the output's innermost axis (``mode="rows"``), or the innermost axis of the sum (``"dot"``); -1 for ``"cols"``
    (its copy is read element by element, the output's axes all in the position's offset). ``q2``: the next
    output axis when the rows form's vectors run over planes of whole padded rows (else None)."""
    src: int
    dims: tuple
    pads: tuple
    steps: dict
    origin: tuple
    q: int
    mode: str = "rows"
    phase: int = 1
    q2: int | None = None
    wino: dict | None = None  # modes "wino" / "winodw": the geometry of gemm_winograd.wino_plan / wino_dw_plan

    def inner(self) -> int:
        """Elements per phase of the copy's innermost axis (its padded extent when ``phase`` is 1)."""
        lo, hi = self.pads[-1]
        return -(-(self.dims[-1] + lo + hi) // self.phase)

    def padded_sizes(self) -> list[int]:
        """The copy's extents: the padded ones, the innermost one as ``phase`` rows of :meth:`inner`."""
        return [d + lo + hi for d, (lo, hi) in zip(self.dims[:-1], self.pads[:-1])] + [self.phase * self.inner()]

    def padded_strides(self) -> list[int]:
        sizes = self.padded_sizes()
        out = [1] * len(sizes)
        for a in range(len(sizes) - 2, -1, -1):
            out[a] = out[a + 1] * sizes[a + 1]
        return out

    def padded_size(self) -> int:
        n = 1
        for d in self.padded_sizes():
            n *= d
        return n


def rows_apply(rows: int, m: int, dtype: DType, halo: int = 0, planes: int = 1) -> bool:
    """Whether a stride-1 convolution with ``m`` output channels whose output rows are ``rows`` long takes the
    "rows" form here (see the module docstring; also ``LUMINAL_DIRECT_CONV``), ``halo`` the padding its copy adds
    to a row and ``planes`` the output rows of one plane (the next axis out; 1: none): :func:`luminal.nn.conv.conv_nd`
    computes a convolution's input gradient as a convolution only where it does."""
    if os.environ.get("LUMINAL_DIRECT_CONV", "1") == "0" or dtype not in (DType.float32, DType.float64):
        return False
    return _taken(_lanes(rows, vector_bytes() // dtype.itemsize, planes, halo)[0], "rows", m)


def window_load(pro) -> Load | None:
    """The :class:`~.kernel.Load` that the prologue ``pro``'s value is when it is nothing else (one buffer of the
    kernel's dtype read through a view over the kernel's axes: an elementwise operation before a convolution,
    such as a ReLU, is stored by the lowering and read through the windows), or None."""
    v = pro.kernel.value
    if not isinstance(v, Load) or v.dtype != pro.kernel.dtype or len(v.view.dims) != len(pro.kernel.dims):
        return None
    return v


def direct_plan(program: Program, g: GemmKernel) -> DirectPlan | None:
    """The :class:`DirectPlan` of GEMM kernel ``g``, or None when the direct kernel cannot compute it (see the
    module docstring for the conditions)."""
    if os.environ.get("LUMINAL_DIRECT_CONV", "1") == "0" or not g.direct:
        return None
    if g.a_pro is None and g.b_pro is None or g.dtype not in (DType.float32, DType.float64):
        return None
    # (sizes may be symbolic where a batch of any size enters: the GEMM's N or K, the source's outermost axis; the
    # number of GEMMs and the rows of the other operand are constants)
    pro = g.b_pro or g.a_pro
    if None in [_int(d) for d in g.dims[:-2]] or _int(g.dims[-2] if pro.side == "b" else g.dims[-1]) is None:
        return None
    load = window_load(pro)
    entry = program.buffers.get(load.buffer) if load is not None else None
    if entry is None or entry[1] != g.dtype:
        return None
    # sizes and strides may be symbolic (a batch of any size; the planning below proves what it needs for every
    # binding from 1 up); the innermost axis, the offset and the masks are constants
    dims = [_size(d) for d in entry[0]]
    kdims = [_size(d) for d in pro.kernel.dims]
    view = load.view
    strides, off = [_size(s) for s in view.strides], _int(view.offset)
    masks = [([_int(c) for c in coeffs], _int(const), _int(size)) for coeffs, const, size in view.masks]
    if not dims or off is None or any(None in m[0] or None in m[1:] for m in masks):
        return None
    dims = _refine([d for d in dims if d != 1] or [1], strides, masks, kdims)  # (size-1 axes: no layout)
    if not isinstance(dims[-1], int):
        return None
    rs = [1] * len(dims)
    for a in range(len(dims) - 2, -1, -1):
        rs[a] = _size(rs[a + 1] * dims[a + 1])
    moving = [d for d in range(len(kdims)) if _long(kdims[d]) and (not same_size(strides[d], 0) or
                                                                  any(m[0][d] for m in masks))]
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
        if not _below(0, s):
            return None
        if j is not None:
            if not isinstance(kdims[d], int):
                return None
            c, size = masks[j][0][d], masks[j][2]
            axes = [a for a in range(len(dims)) if same_size(dims[a], size) and same_size(c * rs[a], s)]
            step = c
        else:
            axes = [a for a in range(len(dims)) if _divides(rs[a], s) and _below(_size(s // rs[a]) * (kdims[d] - 1),
                                                                                dims[a])]
            step = _int(s // rs[axes[0]]) if axes else 0
        if not axes or step is None or step <= 0:
            return None
        steps[d] = (axes[0], step)
        if pro.axes[d] is not None and pro.axes[d][0] not in ("row", "k") and (
                j is not None or axes[0] == len(dims) - 1):
            return None  # (a batch index, a group of channels: unmasked, never along the rows vectors run over)
    # each mask bounds exactly the axis its variables move along, and every variable on that axis
    masked = {}
    for j, (coeffs, const, size) in enumerate(masks):
        on = {steps[d][0] for d in moving if coeffs[d]}
        if len(on) != 1 or any(coeffs[d] for d in range(len(kdims)) if d not in moving):
            return None
        a = on.pop()
        if a in masked or not same_size(dims[a], size) or any(
                (coeffs[d] != 0) != (steps[d][0] == a) or coeffs[d] and coeffs[d] != steps[d][1] for d in moving):
            return None
        masked[a] = const
    origin, rem = [0] * len(dims), _int(off - sum(const * rs[a] for a, const in masked.items()))
    if rem is None:
        return None
    for a in range(len(dims)):
        if a in masked:
            origin[a] = masked[a]
        elif isinstance(rs[a], int):
            origin[a], rem = divmod(rem, rs[a]) if rem >= 0 else (-1, rem)
            if origin[a] < 0:
                return None
        elif not 0 <= rem < _least(rs[a]):  # (a symbolic stride: the coordinate 0 for every binding, or not taken)
            return None
    if rem != 0:
        return None
    # (offset and strides are the parts' by construction) each coordinate in range where no mask bounds it
    pads = []
    for a in range(len(dims)):
        hi = origin[a] + sum(st * (kdims[d] - 1) for d, (ax, st) in steps.items() if ax == a)
        over = _int(to_expr(hi) - (to_expr(dims[a]) - 1))
        if over is None:  # (a symbolic axis: in range for every binding, or not taken)
            if not _below(hi, dims[a]):
                return None
            over = 0
        lo_pad, hi_pad = max(0, -origin[a]), max(0, over)
        if a not in masked and (lo_pad or hi_pad):
            return None
        pads.append((lo_pad, hi_pad))
    vw = vector_bytes() // g.dtype.itemsize
    one = g.b_pro is not None and all(_int(d) == 1 for d in g.dims[:-2])  # (one GEMM, no groups)
    w = wino_plan(pro, _int(g.dims[-2]), _int(g.a_view.dims[-1]), _least(g.dims[-1]), kdims, steps,
                  len(dims) - 1, g.dtype.itemsize, g.wino) if one and g.wino != 0 else None
    wpads = list(pads)
    if w is not None and w["E"] > 2:  # F(4x4, 3x3): every patch within the copy, zeros past the image (an output
        for a, tiles in ((w["H"], w["TH"]), (len(dims) - 1, w["TW"])):  # depends on its whole patch in rounding)
            size = _int(dims[a])
            if size is None:
                w = None
                break
            lo, hi = wpads[a]
            wpads[a] = (lo, max(hi, origin[a] + w["E"] * tiles + 2 - size))
    if w is not None:  # (a 3x3 stride-1 window: Winograd F(2x2, 3x3) or F(4x4, 3x3), gemm_winograd)
        plan = DirectPlan(load.buffer, tuple(dims), tuple(wpads), steps, tuple(origin), w["ow"], "wino", wino=w)
        if _least(plan.padded_size()) <= MAX_PADDED:
            return plan
    w = wino_dw_plan(pro, _int(g.dims[-2]), _int(g.dims[-1]), _least(g.a_view.dims[-1]), kdims, steps, len(dims) - 1,
                     pads, origin, g.a_pro is None and _int(g.a_view.strides[-1]) == 1, g.wino) \
        if one and g.wino != 0 else None
    if w is not None:  # (a 3x3 layer's weight gradient: Winograd F(3x3, 2x2) or F(3x3, 4x4), gemm_winograd_dw)
        return DirectPlan(load.buffer, tuple(dims), tuple(pads), steps, tuple(origin), -1, "winodw", wino=w)
    # the other operand: plain (read in place by "dot": contiguous along K), or through its own prologue
    # (computed into a row-major scratch by its pack callback first)
    fused_other = (g.a_pro if g.b_pro is not None else g.b_pro) is not None
    plain = 1 if fused_other else _int((g.a_view if g.b_pro is not None else g.b_view).strides[-1])
    best, best_use = None, 0.0
    # (the window on side b: "rows" or "dot"; on side a: "dot")
    for mode in ("rows", "dot", "cols") if g.b_pro is not None else ("dot",):
        if mode == "cols":  # vectors along A's rows, the window read element by element (no run, no phases):
            m = _int(g.dims[-2])  # taken from FULL of its lanes where no other form has all of them in use
            use = m / (-(-m // vw) * vw)
            if os.environ.get("LUMINAL_DIRECT_COLS", "1") != "0" and use >= FULL and best_use < 1 and _least(
                    g.dims[-1]) >= COLS_POSITIONS and (_int(g.a_view.dims[-1]) or COLS_K) >= COLS_K:
                plan = DirectPlan(load.buffer, tuple(dims), tuple(pads), steps, tuple(origin), -1, "cols")
                if _least(plan.padded_size()) <= MAX_PADDED:
                    best, best_use = plan, use
            continue
        role = "row" if mode == "rows" else "k"
        q = next((d for d, e in enumerate(pro.axes) if e is not None and e[0] == role and e[1] == 1), None)
        # the run along q: along the input's innermost axis (a step s > 1, a strided convolution: the copy stores
        # that axis as s phases, element c at (c % s, c // s), so q's step there is 1), no other variable of
        # its GEMM index on that axis
        last = len(dims) - 1
        if q is None or q not in steps or steps[q][0] != last or mode == "dot" and plain != 1 or any(
                a == last and d != q and pro.axes[d] is not None and pro.axes[d][0] == role
                for d, (a, _) in steps.items()):
            continue
        plan = DirectPlan(load.buffer, tuple(dims), tuple(pads), steps, tuple(origin), q, mode, steps[q][1])
        if not isinstance(kdims[q], int) or mode == "dot" and None in (_int(g.dims[-2]), _int(g.dims[-1])):
            continue
        if _least(plan.padded_size()) > MAX_PADDED:  # (symbolic: its least size)
            return None
        # the form whose vectors have the most lanes in use wins (a weight gradient's output runs along the
        # kernel's width, 3: "rows" would idle most lanes, "dot" not)
        lq = kdims[q]
        if mode == "dot" and not dot_runs(lq, vw):
            continue
        use, padded = (1.0, False) if mode == "dot" else _lanes(lq, vw)  # (the dot form: vectors across runs)
        if mode == "rows" and plan.phase == 1:  # vectors over whole padded rows (output positions past the row
            # computed and dropped): the next output axis, one padded row of the copy per step
            q2 = next((d for d, e in enumerate(pro.axes) if e == ("row", lq) and d in steps and
                       isinstance(kdims[d], int)), None)
            wp, rsp = plan.inner(), plan.padded_strides()
            if q2 is not None and same_size(rsp[steps[q2][0]] * steps[q2][1], wp) and not any(
                    a == steps[q2][0] and d != q2 and pro.axes[d] is not None and pro.axes[d][0] == "row"
                    for d, (a, _) in steps.items()):
                use, padded = _lanes(lq, vw, kdims[q2], wp - lq)
                if padded:
                    plan = dataclasses.replace(plan, q2=q2)
        other = _int(g.dims[-2] if pro.side == "b" else g.dims[-1])  # rows of the packed / plain operand
        if _taken(use, mode, other, g.direct == "marginal") and use > best_use:
            best, best_use = plan, use
    return best


def _lanes(rows: int, vw: int, planes: int = 1, halo: int | None = None) -> tuple[float, bool]:
    """``(share of lanes in use, over padded rows)`` of the vectors of a form whose runs are ``rows`` long: one
    run after the other (a run's last vector partial), or, given the ``halo`` of a padded row of the copy and the
    ``planes`` rows of a plane, over whole padded rows (positions in the halo computed and dropped) where that
    uses more lanes (and the halo is under half a vector)."""
    use = rows / (-(-rows // vw) * vw)
    if planes > 1 and halo is not None and 2 * halo < vw:
        padded = rows * planes / (-(-(planes * (rows + halo)) // vw) * vw)
        if padded > use:
            return padded, True
    return use, False


def _taken(use: float, mode: str, other: int, marginal: bool = False) -> bool:
    """Whether a form with ``use`` of its lanes in use is taken, ``other`` the rows of the packed / plain operand:
    whole vectors always (the dot form has no others), the rows form also from ``FULL`` on, or from half with at
    most ``FEW`` rows, or (``marginal``: a GEMM the prologue search measured so) from half with any rows, or from
    ``DEPTHWISE_USE`` with at most ``DEPTHWISE_ROWS`` rows."""
    return use == 1 or mode == "rows" and (use >= FULL or (other <= FEW or marginal) and use >= 0.5
                                           or other <= DEPTHWISE_ROWS and use >= DEPTHWISE_USE)


def _refine(dims, strides, masks, kdims) -> list[int]:
    """``dims`` (a buffer's, row-major) with axes split where the view addresses a stretch of one axis as an
    axis of its own (a buffer stored as ``(N, C, H*W)`` read as ``(N, C, H, W)``): at every element stride the
    view's variables and masks imply (a mask over a variable of coefficient ``c`` and stride ``s`` bounds an
    axis of stride ``s / c`` and, with its size, one of stride ``s / c * size``) that divides an axis's span."""
    cuts = set()
    for d, s in enumerate(strides):
        if not _long(kdims[d]) or not _below(0, s):
            continue
        inside = [(coeffs[d], size) for coeffs, _, size in masks if coeffs[d]]
        if not inside:
            cuts.add(_size(s))
        for c, size in inside:
            if c > 0 and _divides(c, s):
                cuts |= {_size(s // c), _size(s // c * size)}
    # a cut that an unmasked variable's range runs across is no axis of its own (a stride-2 convolution without
    # padding: the output position's stride 2 would cut a row of 66 into (33, 2), but the kernel's taps run
    # across it; left whole, the row is read in phases)
    crossed = {b for b in cuts if any(isinstance(kdims[d], int) and not any(c[d] for c, _, _ in masks) and
                                      _below(0, st) and _below(st, b) and not _below(st * (kdims[d] - 1), b)
                                      for d, st in enumerate(strides))}
    dims = list(dims)
    changed = True
    while changed:
        changed = False
        rs = [1] * len(dims)
        for a in range(len(dims) - 2, -1, -1):
            rs[a] = _size(rs[a + 1] * dims[a + 1])
        for a in range(len(dims)):
            lo, hi = rs[a], _size(rs[a] * dims[a])
            # (a cut below a symbolic end may make an axis of extent 1 at some binding: still exact)
            cut = next((b for b in sorted(cuts, key=lambda b: (_least(b), str(b))) if _below(lo, b) and (
                _below(b, hi) or not isinstance(hi, int) and not same_size(b, hi) and _below(b, to_expr(hi) + 1))
                and _divides(lo, b) and _divides(b, hi) and b not in crossed), None)
            if cut is not None:
                dims[a:a + 1] = [_size(to_expr(hi) // cut), _size(to_expr(cut) // lo)]
                changed = True
                break
    return dims


def render_direct(r, name: str, g: GemmKernel, plan: DirectPlan) -> str:
    """C of the direct kernel ``name`` for GEMM ``g`` (the signature of the fused own GEMM,
    :func:`~.gemm_prologue.fused_gemm_source`: B is the ``lm_pro_T`` record, unused here beyond its type), rendered
    through ``r`` (the :class:`~luminal.codegen.c.CRenderer`: buffer slots and pointer names)."""
    from .gemm import _COMMON

    if plan.mode == "winodw":
        return render_wino_dw(r, name, g, plan)
    pro = g.b_pro or g.a_pro
    kdims = [_size(d) for d in pro.kernel.dims]
    ctype = g.dtype.c_type
    vw = vector_bytes() // g.dtype.itemsize
    rsp = plan.padded_strides()
    wino_rows = rsp[plan.wino["H"]] if plan.mode == "wino" else 0  # (the copy's stride along the rows' axis)
    wslack = (plan.wino["E"] + 2) * vw if plan.mode == "wino" else 0  # (a row's last vectors read past it)
    last, ph = len(rsp) - 1, plan.phase
    q_role = pro.axes[plan.q][0] if plan.q >= 0 else "row"  # (the cols form: no run axis)
    base = _c(sum(rsp[a] * (plan.origin[a] + plan.pads[a][0]) for a in range(len(rsp)) if a != last or ph == 1), r)

    def coord(d, var):
        return f"(({var} / {pro.axes[d][1]}LL) % {_c(kdims[d], r)})"

    def part(role, var):  # the offset in the copy contributed by the GEMM index `var`'s axes (the run's axis aside)
        terms = [f"{_c(rsp[a] * st, r)} * {coord(d, var)}" for d, (a, st) in sorted(plan.steps.items())
                 if pro.axes[d] is not None and pro.axes[d][0] == role and d not in (plan.q, plan.q2) and
                 (a != last or ph == 1)]
        if ph > 1 and role != q_role:  # the innermost axis in phases: coordinate r + s*q at (r % s, r // s + q)
            c = " + ".join([str(plan.origin[last] + plan.pads[last][0])] + [
                f"{st}LL * {coord(d, var)}" for d, (a, st) in sorted(plan.steps.items())
                if a == last and d != plan.q and pro.axes[d] is not None and pro.axes[d][0] == role])
            terms.append(f"(({c}) % {ph}LL) * {plan.inner()}LL + ({c}) / {ph}LL")
        return " + ".join(terms) or "0"

    lq = kdims[plan.q]
    vpr = -(-lq // vw)  # vectors per run of the innermost axis
    ptr = r.pointer(plan.src)
    rows, cols = plan.mode == "rows", plan.mode == "cols"
    mr = tile(g.dtype, _int(g.dims[-2]))[0]  # (the rows form's rows of A; the cols form's: vectors of them)
    if cols:
        mv, _, _ = cols_tile(g.dtype, _int(g.dims[-2]))
        mr = mv * vw
    wino = plan.mode == "wino"
    if wino:
        mr = plan.wino["MR"]
    # the copy of the source with its halo, row by row of the copy (all phases of a row of the innermost axis): a
    # row of the halo zeroed, a row of the source copied to its padded place and its halo zeroed around it, while
    # the row is in L1 (zeroing the whole copy first cost a pass over it: a MobileNet's stride-2 stem 0.70 -> 0.53 ms)
    inner, lo_in, psz = plan.dims[-1], plan.pads[-1][0], plan.padded_sizes()
    rowlen = psz[-1]
    prows, src_row = _size(_prod(psz[:-1])), []
    for a in range(len(plan.dims) - 1):  # (the outermost axis needs no modulo: a symbolic one has none)
        at = f"(prow / {_c(_prod(psz[a + 1:-1]), r)})" + (f" % {_c(psz[a], r)}" if a else "")
        src_row.append(f"{{ const long long c = {at} - {plan.pads[a][0]}; inside &= c >= 0 && c < "
                       f"{_c(plan.dims[a], r)}; row += c * {_c(_prod(plan.dims[a + 1:-1]), r)}; }}")
    tail = rowlen - lo_in - inner  # (ph == 1: the row's right halo)
    # scratch: the copy, A interleaved by MR rows ("rows"), the offset table of the other index, the vector tables
    table = "K" if rows or cols else ("N" if pro.side == "b" else "M")
    other = g.a_pro if pro.side == "b" else g.b_pro
    batch = _batch(g, plan, pro, rsp, kdims, r)
    nbat = batch[0] if batch else 1
    extra = wino_scratch(ctype, plan.wino) if wino else cols_scratch(ctype, mr, nbat) if cols \
        else "(size_t)({b}LL * MB * {mr} * K) * sizeof({t})".format(
        b=nbat, mr=mr, t=ctype) if rows else \
        f"(size_t)(3 * (K / {vw}LL) + {vw} + 8) * sizeof(long long) + (size_t)(K / {vw}LL + 8) * sizeof(int)" + \
        (f" + (size_t)({nbat}LL * {'M' if pro.side == 'b' else 'N'} * K) * sizeof({ctype}) + 128"
         if other is not None else "")
    lines = [
        f"/* {name}: direct convolution (see luminal/codegen/gemm_direct.py), {plan.mode} form */",
        f"static int {name}(long long M, long long N, long long K, const {ctype} *A, long long sam, long long sak,",
        f"                  const {ctype} *Bpro, long long sbn, long long sbk, {ctype} *C, lm_epilogue epi,"
        " void **bufs, const long long *syms) {",
        f"    typedef {ctype} vT __attribute__((vector_size({vw * g.dtype.itemsize}), aligned({g.dtype.itemsize})));",
        f"    const {ctype} *restrict {ptr} = (const {ctype} *)bufs[{r.slot[plan.src]}];",
        *[f"    const long long {r.names[s]} = syms[{r.symbols.index(s)}]; (void){r.names[s]};" for s in r.symbols],
        "    (void)Bpro; (void)sbn; (void)sbk; (void)sam; (void)sak; (void)syms;",
        "    if (M <= 0 || N <= 0) return 0;",
        "    if (K <= 0) {  /* (every batch element's product: zeros) */",
        f"        for (long long m = 0; m < {nbat}LL * M; m++) memset(C + m * N, 0, (size_t)N * sizeof({ctype}));",
        f"        return epi ? lm_epilogue_all(epi, bufs, syms, {nbat}LL * M, N) : 0;",
        "    }",
        *([f"    const long long MB = (M + {mr - 1}) / {mr};"] if rows or cols or wino else []),
        f"    const long long XP = {_c(plan.padded_size() + 2 * vw + plan.inner() + wino_rows + wslack, r)};",
        f"    size_t bytes = (size_t)XP * sizeof({ctype}) + {extra} + (size_t){table} * sizeof(long long) + 128;",
        "    char *mem = (char *)lm_og_grow(&lm_dc_buf, &lm_dc_cap, bytes);",
        "    if (!mem) return 3;",
        f"    {ctype} *restrict xp = ({ctype} *)mem;",
        f"    char *rest = mem + (((size_t)XP * sizeof({ctype}) + 63) & ~(size_t)63);",
        # (threads from fewer multiply-adds where A has 1-3 rows, a depthwise layer's: each costs ~10x a dense one's;
        # MobileNet at batch 1: 1.48 -> 1.37 ms)
        f"    const int par = !omp_in_parallel() && {nbat}.0 * (double)M * (double)N * (double)K >= "
        f"(double)LM_OWN_GEMM_PAR_MACS / (M < 4 ? {FEW_ROWS_PAR} : 1);",
        "    int err = 0;",
        "    #pragma omp parallel if(par)",
        "    {",
        "        #pragma omp single nowait  /* (the slack past the copy) */",
        f"        memset(xp + {_c(plan.padded_size(), r)}, 0, (size_t)(XP - {_c(plan.padded_size(), r)}) * "
        f"sizeof({ctype}));",
        "        #pragma omp for schedule(static)",
        f"        for (long long prow = 0; prow < {_c(prows, r)}; prow++) {{",
        f"            {ctype} *restrict dst = xp + prow * {rowlen}LL;",
        "            long long row = 0; int inside = 1;",
        *[f"            {x}" for x in src_row],
        "            if (!inside) {",
        f"                memset(dst, 0, {rowlen}LL * sizeof({ctype}));",
        "                continue;",
        "            }",
        *([f"            memset(dst, 0, {lo_in}LL * sizeof({ctype}));"] if ph == 1 and lo_in else []),
        *([f"            memset(dst + {lo_in + inner}LL, 0, {tail}LL * sizeof({ctype}));"] if ph == 1 and tail else []),
        *([f"            memset(dst, 0, {rowlen}LL * sizeof({ctype}));"] if ph > 1 else []),
        *([f"            memcpy(dst + {lo_in}, {ptr} + row * {inner}LL, {inner} * sizeof({ctype}));"]
          if ph == 1 else split_two(ctype, vw, "dst", f"{ptr} + row * {inner}LL", inner, lo_in,
                                     plan.inner()) if ph == 2 else [
            f"            for (long long r = 0; r < {ph}; r++) {{  /* phase r: the elements c = r (mod {ph}) */",
            f"                {ctype} *restrict d = dst + r * {plan.inner()}LL;",
            f"                const {ctype} *restrict s = {ptr} + row * {inner}LL - {plan.pads[-1][0]};",
            f"                for (long long c = {plan.pads[-1][0]} + ((r - {plan.pads[-1][0]}) % {ph} + {ph}) % {ph}; "
            f"c < {plan.pads[-1][0] + inner}; c += {ph})",
            f"                    d[c / {ph}] = s[c];",
            "            }"]),
        "        }",
        "    }",
    ]
    wide = None if plan.q2 is None else (kdims[plan.q2], plan.inner())
    lines += wino_loops(name, part, ctype, base, plan.wino, _c(wino_rows, r), _int(g.dims[-2]),
                        g.a_pro is not None) if wino else \
        cols_loops(part, ctype, vw, base, _int(g.dims[-2]), g.a_pro is not None, batch) if cols else \
        rows_loops(part, ctype, mr, vw, lq, vpr, base, _int(g.dims[-2]), g.a_pro is not None, wide, batch) \
        if rows else dot_loops(part, ctype, vw, lq, base, pro.side, other is not None, batch,
                               (_int(g.dims[-2]), _int(g.dims[-1])) if pro.side == "b" else
                               (_int(g.dims[-1]), _int(g.dims[-2])))
    lines += ["    return err;", "}"]
    head = _COMMON + "\n#ifndef LM_DIRECT_BUF\n#define LM_DIRECT_BUF\n" + DIRECT_BUF
    if wino:
        head += "\n" + wino_tiles(name, ctype, plan.wino["MR"], plan.wino["NV"], plan.wino["VW"])
    return head + "\n".join(lines)


def _batch(g: GemmKernel, plan: DirectPlan, pro, rsp, kdims, r) -> tuple | None:
    """``(count, copy offset, plain operand offset)`` of batched GEMM ``g`` (a grouped convolution: one GEMM per
    group), the offsets C expressions of the flat batch index ``b``, or None when ``g`` is not batched."""
    nb = len(g.dims) - 2
    if nb == 0:
        return None
    bdims = [_int(d) for d in g.dims[:nb]]
    bstrides = [1] * nb
    for j in range(nb - 2, -1, -1):
        bstrides[j] = bstrides[j + 1] * bdims[j + 1]
    coord = [f"((b / {bstrides[j]}LL) % {bdims[j]}LL)" for j in range(nb)]
    xterms = [f"{_c(rsp[a] * st, r)} * (({coord[pro.axes[d][0][1]]} / {pro.axes[d][1]}LL) % {_c(kdims[d], r)})"
              for d, (a, st) in sorted(plan.steps.items()) if pro.axes[d] is not None and pro.axes[d][0] not in
              ("row", "k")]
    view = g.a_view if pro.side == "b" else g.b_view
    pterms = [f"{_c(view.strides[j], r)} * {coord[j]}" for j in range(nb) if not same_size(view.strides[j], 0)]
    count = 1
    for d in bdims:
        count *= d
    return count, " + ".join(xterms) or "0", " + ".join(pterms) or "0"
