"""Shared helpers of the high-level-op tests: seeded data, run a graph, compare with PyTorch/numpy."""

import numpy as np
import torch

import luminal as lm


def make(dtype, shape=(3, 4, 5), seed=0, low=-5, high=5):
    """Seeded random data of a numpy ``dtype``: bools ~ Bernoulli(0.5), ints uniform in [low, high), floats N(0, 1)."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind == "i":
        return rng.integers(low, high, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def evaluate(build):
    """``build(cx)`` returns a tensor (or a list/tuple); execute and return the numpy value(s)."""
    cx = lm.Graph()
    out = build(cx)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    for o in outs:
        o.retrieve()
    cx.execute()
    res = [o.data() for o in outs]
    return res if isinstance(out, (list, tuple)) else res[0]


def run(fn, *arrays):
    """``fn`` applied to graph inputs holding ``arrays``, executed; the numpy result (a list for a list/tuple)."""
    return evaluate(lambda cx: fn(*[cx.tensor(a.shape, dtype=lm.DType(a.dtype.name)).set(a) for a in arrays]))


def check(got, expected, rtol=0.0, atol=0.0):
    """Same shape and dtype as ``expected`` (a torch tensor or numpy array); values exact for bool/int results,
    within ``rtol``/``atol`` for floats (NaN matches NaN)."""
    exp = expected.detach().numpy() if isinstance(expected, torch.Tensor) else np.asarray(expected)
    assert got.shape == exp.shape, (got.shape, exp.shape)
    assert got.dtype == exp.dtype, (got.dtype, exp.dtype)
    if exp.dtype.kind in "biu" or (rtol == 0 and atol == 0):
        np.testing.assert_array_equal(got, exp)
    else:
        np.testing.assert_allclose(got, exp, rtol=rtol, atol=atol, equal_nan=True)


def optimizer_matches_torch(m, tm, opt_cls, torch_cls, kw, device, seed, steps=15):
    """Train the luminal model ``m`` (graph-built update, compiled once on ``device``) and its torch twin ``tm``
    with the same optimizer settings on fixed mini-batches of a squared-error loss; the loss at every step and
    the final parameters must agree within rtol 1e-4 / atol 1e-5 (float32)."""
    import luminal as lm

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((32, 5)).astype(np.float32)
    Y = rng.standard_normal((32, 3)).astype(np.float32)
    cx = lm.Graph()
    x, y = cx.tensor(("b", 5)), cx.tensor(("b", 3))
    loss = ((m(x) - y) ** 2).mean().retrieve()
    opt = opt_cls(m.parameters(), **kw)
    opt.minimize(loss)
    cx.compile(device=device)
    topt = torch_cls(tm.parameters(), **kw)
    for step in range(steps):
        sl = slice(step % 4 * 8, step % 4 * 8 + 8)
        x.set(X[sl])
        y.set(Y[sl])
        cx.execute()
        topt.zero_grad()
        tl = ((tm(torch.from_numpy(X[sl])) - torch.from_numpy(Y[sl])) ** 2).mean()
        tl.backward()
        topt.step()
        np.testing.assert_allclose(loss.item(), tl.item(), rtol=1e-4, err_msg=f"step {step}")
    for name, value in tm.state_dict().items():
        np.testing.assert_allclose(m.state_dict()[name], value.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


def run_sanitized(script: str, cache_dir, marker: str, extra_cflags: str = "", timeout: int = 600) -> None:
    """Run ``script`` in a fresh Python whose compiled programs are built with AddressSanitizer and UBSan
    (``LUMINAL_CFLAGS``; libasan preloaded) and cached under ``cache_dir``; asserts it exits 0 and prints
    ``marker``. Skips when the compiler has no libasan."""
    import os
    import subprocess
    import sys

    import pytest

    from luminal.runtime.cpu import find_compiler

    cc = find_compiler()
    libasan = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(libasan) or not os.path.exists(libasan):
        pytest.skip("libasan is not available for this compiler")
    env = dict(os.environ, LUMINAL_CACHE_DIR=str(cache_dir), LD_PRELOAD=libasan,
               LUMINAL_CFLAGS="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined "
                              "-fno-omit-frame-pointer " + extra_cflags,
               ASAN_OPTIONS="detect_leaks=0", OMP_NUM_THREADS="2")
    env.pop("LUMINAL_DEVICE", None)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=timeout)
    assert proc.returncode == 0 and marker in proc.stdout, proc.stderr[-3000:]


def run_in_threads(work, n: int) -> None:
    """``work(i)`` for i in range(n), each on its own thread, all joined; raises the first error any raised
    (an exception in a thread is otherwise lost)."""
    import threading
    errors = []

    def guarded(i):
        try:
            work(i)
        except BaseException as e:  # noqa: BLE001  (re-raised below, in the test's thread)
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
