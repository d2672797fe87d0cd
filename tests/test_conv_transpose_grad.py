"""Strided transposed convolutions: PyTorch's algorithm (GEMM + col2im forward, the windows of the upstream
gradient for both gradients), checked against torch.autograd, and the work the compiled step does.

Before, the forward was a convolution of the zero-interleaved input and its input gradient a general transpose of
windows over interleaved zeros (a gather of up to 256 candidates per element): a DCGAN-style decoder trained at
120x torch's step time. Oracles: torch's forward and gradients (float64 inputs, 1e-9), and the count of
multiply-adds the GEMM kernels of the compiled step perform against the convolution's own.
"""

import numpy as np
import pytest

import luminal as lm
import luminal.nn as lnn
from luminal.codegen.kernel import Compute, ElementwiseKernel, GemmKernel, GatherValue, Load, Remapped
from luminal.training import grad

torch = pytest.importorskip("torch")

CASES = [  # (dims, in, out, kernel, kwargs)
    (1, 3, 4, 3, dict(stride=2, padding=1, output_padding=1)),
    (1, 4, 2, 4, dict(stride=3, padding=2, groups=2)),
    (2, 3, 2, 4, dict(stride=2, padding=1)),
    (2, 2, 4, (2, 3), dict(stride=(2, 1), padding=(0, 1), dilation=(1, 2))),
    (2, 2, 2, 3, dict(stride=2, output_padding=2, dilation=3)),  # output_padding >= stride (< dilation)
    (3, 2, 4, 2, dict(stride=2, padding=1, output_padding=1, groups=2)),
]


def _modules(dims, cin, cout, k, kw, bias=True):
    name = f"ConvTranspose{dims}d"
    ours = getattr(lnn, name)(cin, cout, k, bias=bias, **kw)
    theirs = getattr(torch.nn, name)(cin, cout, k, bias=bias, **kw).double()
    theirs.load_state_dict({name: torch.from_numpy(v.astype(np.float64)) for name, v in ours.state_dict().items()})
    return ours, theirs


@pytest.mark.parametrize("device", ["reference", "cpu"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}d-{c[4]}")
def test_gradients_match_torch(case, device):
    dims, cin, cout, k, kw = case
    rng = np.random.default_rng(0)
    shape = (2, cin) + (5,) * dims
    a = rng.standard_normal(shape)
    ours, theirs = _modules(dims, cin, cout, k, kw)
    ours = ours.to("float64")
    cx = lm.Graph()
    x = cx.tensor(shape, dtype="float64").set(a)
    y = ours(x)
    w = cx.tensor(tuple(int(d) for d in y.dims), dtype="float64").set(rng.standard_normal(tuple(int(d) for d in y.dims)))
    loss = (y * w).sum()
    params = [p for _, p in ours.named_parameters()]
    gs = [g.retrieve() for g in grad(loss, [x] + params)]
    y.retrieve()
    if device == "cpu":
        cx.compile(device="cpu")
    cx.execute()
    tx = torch.from_numpy(a).requires_grad_()
    ty = theirs(tx)
    tgs = torch.autograd.grad((ty * torch.from_numpy(np.asarray(w.data()))).sum(), [tx] + list(theirs.parameters()))
    np.testing.assert_allclose(y.data(), ty.detach().numpy(), rtol=1e-9, atol=1e-9)
    for g, t in zip(gs, tgs):
        np.testing.assert_allclose(g.data(), t.numpy(), rtol=1e-9, atol=1e-9)


def test_unbatched_and_symbolic_batch():
    ours, theirs = _modules(2, 3, 2, 4, dict(stride=2, padding=1))
    rng = np.random.default_rng(1)
    cx = lm.Graph()
    xs = cx.tensor(("b", 3, 6, 6), name="x")
    xu = cx.tensor((3, 6, 6), name="xu")
    ys, yu = ours(xs), ours(xu)
    gs = [g.retrieve() for g in grad((ys * ys).sum() + (yu * yu).sum(), [xs, xu, ours.weight])]
    cx.compile(device="cpu")
    for b in (1, 3):
        a, au = rng.standard_normal((b, 3, 6, 6)).astype(np.float32), rng.standard_normal((3, 6, 6)).astype(np.float32)
        xs.set(a)
        xu.set(au)
        cx.execute()
        tx, tu = torch.from_numpy(a).double().requires_grad_(), torch.from_numpy(au).double().requires_grad_()
        t_loss = (theirs(tx) ** 2).sum() + (theirs(tu) ** 2).sum()
        tgs = torch.autograd.grad(t_loss, [tx, tu, theirs.weight])
        for g, t in zip(gs, tgs):
            np.testing.assert_allclose(g.data(), t.numpy(), rtol=2e-4, atol=2e-4)


def _loads(value) -> int:
    """Buffer reads in an inlined value tree."""
    if isinstance(value, Load):
        return 1
    if isinstance(value, Compute):
        return sum(_loads(a) for a in value.args)
    if isinstance(value, Remapped):
        return _loads(value.value)
    if isinstance(value, GatherValue):
        return 1 + _loads(value.index) + (0 if value.data is None else _loads(value.data))
    return 0


def test_the_step_does_the_convolutions_work_not_the_interleaved_zeros():
    """The GEMMs of a training step (forward, input and weight gradients) multiply-add no more than 3x the
    transposed convolution's own products (N * L * C_in * C_out/G * K): no product with the stride^2 - 1 zeros
    in between the input's pixels (the former forward did 4x the work here), and no gather in the graph. The
    elementwise kernels read at most 4 K times the output: the col2im sums K planes once (forward); the
    gradients come from the windows of the upstream gradient, not from undoing K padded planes (K^2 reads per
    element of the interleaved columns: 6x torch's step time)."""
    cin, cout, k, n, side = 16, 8, 4, 4, 16
    m = lnn.ConvTranspose2d(cin, cout, k, stride=2, padding=1)
    cx = lm.Graph()
    x = cx.tensor((n, cin, side, side)).set(np.random.default_rng(2).standard_normal((n, cin, side, side))
                                             .astype(np.float32))
    y = m(x)
    for g in grad((y * y).mean(), [x, m.weight, m.bias]):
        g.retrieve()
    assert not any(isinstance(node.op, lm.ops.Gather) for node in cx.nodes.values())
    cx.compile(device="cpu")
    macs = 0
    for kern in cx.runtime.program.kernels:
        if isinstance(kern, GemmKernel):
            macs += int(np.prod([int(d) for d in kern.dims])) * int(kern.a_view.dims[-1])
    own = n * side * side * cin * cout * k * k
    assert macs <= 3 * own, (macs, own)
    reads = sum(int(np.prod([int(d) for d in kern.dims])) * _loads(kern.value)
                for kern in cx.runtime.program.kernels if isinstance(kern, ElementwiseKernel))
    out_size = int(np.prod([int(d) for d in y.dims]))
    assert reads <= 4 * k * k * out_size, (reads, out_size)  # (here: 1.6 M; 9.9 M undoing K padded planes)


@pytest.mark.parametrize("interleave", [False, True])
def test_views_across_a_flattened_pair_undo_without_a_gather(interleave):
    """A pad read across two source axes flattened into one, and the zero-interleave of a strided transposed
    convolution (each element followed by a zero, then read flattened), as the convolution under autocast reads
    its input, are undone as slices of the merged axes, not by the general gather-and-sum (checked: no Gather
    node; values against numpy)."""
    rng = np.random.default_rng(3)
    shape = (2, 3, 4) if interleave else (2, 3, 4, 2)
    a = rng.standard_normal(shape).astype(np.float32)
    cx = lm.Graph()
    x = cx.tensor(shape).set(a)
    if interleave:  # (2, 3, 4) -> (2, 3, 4, 2) with a zero in each second slot -> (2, 3, 8)[:, :, :7]
        y = x.unsqueeze(3).pad_axis(3, 0, 1).merge_dims(2, 3).slice_axis(2, 0, 7)
    else:
        y = x.reshape((2, 3, 8))
    y = y.pad(((0, 0), (0, 0), (2, 1)))
    w = rng.standard_normal(tuple(int(d) for d in y.dims)).astype(np.float32)
    (gx,) = grad((y * cx.tensor(w.shape).set(w)).sum(), [x])
    gx.retrieve()
    assert not any(isinstance(node.op, lm.ops.Gather) for node in cx.nodes.values())
    cx.execute()
    inner = w[:, :, 2:2 + int(y.dims[2]) - 3]
    want = inner[:, :, ::2] if interleave else inner.reshape(shape)
    np.testing.assert_array_equal(gx.data(), want)


@pytest.mark.parametrize("dims,kw", [
    (1, dict(stride=2, padding=1)),
    (2, dict(stride=2, padding=1)),                      # a ResNet downsampling convolution
    (2, dict(stride=(2, 3), padding=(1, 2), dilation=(1, 2))),
    (3, dict(stride=2, padding=1, groups=2)),
])
def test_strided_convolution_input_gradient_without_a_gather(dims, kw):
    """A strided convolution reads its padded input at ``stride * o + k``: its input gradient is undone per window
    offset as a zero-interleaved, shifted copy of the upstream gradient (unview's dilation of strided axes), not by
    the general gather-and-sum (27 candidates per element for a 3x3x3 kernel: 56 % of a Conv3d/ConvTranspose3d
    step). Values against torch.autograd in float64."""
    rng = np.random.default_rng(4)
    shape = (2, 4) + (9,) * dims
    a = rng.standard_normal(shape)
    name = f"Conv{dims}d"
    ours = getattr(lnn, name)(4, 6, 3, **kw).to("float64")
    theirs = getattr(torch.nn, name)(4, 6, 3, **kw).double()
    theirs.load_state_dict({k: torch.from_numpy(v) for k, v in ours.state_dict().items()})
    cx = lm.Graph()
    x = cx.tensor(shape, dtype="float64").set(a)
    y = ours(x)
    w = rng.standard_normal(tuple(int(d) for d in y.dims))
    (gx,) = grad((y * cx.tensor(w.shape, dtype="float64").set(w)).sum(), [x])
    gx.retrieve()
    assert not any(isinstance(node.op, lm.ops.Gather) for node in cx.nodes.values())
    cx.compile(device="cpu")
    cx.execute()
    tx = torch.from_numpy(a).requires_grad_()
    (tg,) = torch.autograd.grad((theirs(tx) * torch.from_numpy(w)).sum(), [tx])
    np.testing.assert_allclose(gx.data(), tg.numpy(), rtol=1e-9, atol=1e-9)
