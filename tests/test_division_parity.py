"""Division parity: exact 64-bit integer floor division (``//``, ``div(rounding_mode=...)``) beyond float64's
2^53, and float ``remainder`` with PyTorch's signed zeros and special values.

Oracles: numpy's int64 ``//`` and ``%`` (exact, floor semantics, as PyTorch's); ``torch.remainder`` on CPU for
floats. Both devices. Values up to +-2^62 and divisors from +-2 to +-2^40, plus the +-1 and int64 extremes
that wrap as in PyTorch.
"""

import numpy as np
import pytest

import luminal as lm


def _cases():
    rng = np.random.default_rng(64)
    a = np.concatenate([rng.integers(-(2 ** 62), 2 ** 62, 200, dtype=np.int64),
                        rng.integers(-(2 ** 20), 2 ** 20, 50, dtype=np.int64),
                        np.array([2 ** 53 + 1, -(2 ** 53) - 1, 2 ** 62 + 12345, 2 ** 63 - 1, -(2 ** 63) + 5, 0, 7],
                                 dtype=np.int64)])
    b = np.concatenate([rng.integers(2, 1000, 100, dtype=np.int64) * rng.choice([-1, 1], 100),
                        rng.integers(2, 2 ** 40, 100, dtype=np.int64) * rng.choice([-1, 1], 100),
                        rng.integers(2, 9, 50, dtype=np.int64),
                        np.array([3, -7, 2, 1, -1, 5, -1], dtype=np.int64)])
    return a, b


@pytest.mark.parametrize("device", ["reference", "cpu"])
def test_int64_floor_division_is_exact(device):
    a_np, b_np = _cases()
    cx = lm.Graph()
    a = cx.tensor(a_np.shape, dtype="int64", name="a").set(a_np)
    b = cx.tensor(b_np.shape, dtype="int64", name="b").set(b_np)
    q = (a // b).retrieve()
    t = a.div(b, rounding_mode="trunc").retrieve()
    r = (a % b).retrieve()
    if device != "reference":
        cx.compile(device=device)
    cx.execute()
    with np.errstate(over="ignore"):
        expect_q = a_np // b_np
    np.testing.assert_array_equal(q.data(), expect_q)
    np.testing.assert_array_equal(r.data(), a_np % b_np)
    trunc = expect_q + ((a_np % b_np != 0) & ((a_np < 0) ^ (b_np < 0)))
    np.testing.assert_array_equal(t.data(), trunc)


@pytest.mark.parametrize("device", ["reference", "cpu"])
def test_int64_floor_division_by_a_scalar(device):
    rng = np.random.default_rng(3)
    a_np = rng.integers(-(2 ** 62), 2 ** 62, 64, dtype=np.int64)
    cx = lm.Graph()
    a = cx.tensor(a_np.shape, dtype="int64").set(a_np)
    outs = {d: (a // d).retrieve() for d in (3, -10, 1000003)}
    if device != "reference":
        cx.compile(device=device)
    cx.execute()
    for d, o in outs.items():
        np.testing.assert_array_equal(o.data(), a_np // d)


@pytest.mark.parametrize("device", ["reference", "cpu"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_remainder_matches_torch_including_signed_zeros(device, dtype):
    torch = pytest.importorskip("torch")
    vals = [-4.0, 4.0, -0.0, 0.0, 5.0, -5.0, 3.5, -3.5, np.inf, -np.inf, np.nan, 7.0, -6.0, 1e30, -1e30]
    divs = [2.0, -2.0, 3.0, -3.0, np.inf, -np.inf, 0.0, -0.0, np.nan, 2.5, -2.5, 1e-3]
    a_np = np.array([a for a in vals for _ in divs], dtype)
    b_np = np.array([b for _ in vals for b in divs], dtype)
    expect = torch.remainder(torch.from_numpy(a_np), torch.from_numpy(b_np)).numpy()
    cx = lm.Graph()
    r = (cx.tensor(a_np.shape, dtype=dtype).set(a_np) % cx.tensor(b_np.shape, dtype=dtype).set(b_np)).retrieve()
    if device != "reference":
        cx.compile(device=device)
    cx.execute()
    got = r.data()
    both_nan = np.isnan(got) & np.isnan(expect)
    assert np.all(both_nan | (got == expect)), (a_np[~both_nan & (got != expect)], b_np[~both_nan & (got != expect)])
    # the sign of a zero (and of every non-NaN result) is torch's
    assert np.array_equal(np.signbit(got[~both_nan]), np.signbit(expect[~both_nan]))
