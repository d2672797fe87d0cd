"""Gathers indexed by a buffer of known range render as selects (luminal.codegen.values.buffer_ranges).

A padding mask is cast to an integer index once and read by every layer's ``where``: its buffer holds only 0 and
1, so each ``where`` is a select with no bounds check (the check, a branch that stores an error flag, blocked
vectorization: a fixed-shape BERT's masked softmax took 150 ms per layer at 32 x 128). Oracles: numpy and torch.
"""

import re

import numpy as np
import torch

import luminal as lm


def test_masked_softmax_over_a_shared_mask_is_branch_free_and_exact():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4, 8, 8)).astype(np.float32)
    mask = np.zeros((3, 8), bool)
    mask[0, 5:] = True
    mask[2, 1:] = True
    cx = lm.Graph()
    t = cx.tensor(x.shape).set(x)
    m = cx.tensor(mask.shape, dtype="bool").set(mask)
    wide = m.reshape((3, 1, 1, 8)).expand((3, 4, 8, 8))
    y1 = lm.where(wide, float("-inf"), t).softmax(-1).retrieve()
    y2 = lm.where(wide, float("-inf"), t * 2.0).softmax(-1).retrieve()     # the same mask read again
    cx.compile(device="cpu")
    cx.execute()
    tm = torch.from_numpy(mask)[:, None, None, :]
    tx = torch.from_numpy(x)
    np.testing.assert_allclose(y1.data(), torch.softmax(tx.masked_fill(tm, float("-inf")), -1).numpy(),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y2.data(), torch.softmax((2 * tx).masked_fill(tm, float("-inf")), -1).numpy(),
                               rtol=1e-5, atol=1e-6)
    for m_ in re.finditer(r"static int kbody_\d+\(.*?\n}\n", cx.runtime.source, re.S):
        assert "err = 1" not in m_.group(0), m_.group(0)


def test_an_index_buffer_of_unknown_range_keeps_its_check():
    """An integer index computed from data (not a cast of a bool) is still checked: out of range raises."""
    cx = lm.Graph()
    data = cx.tensor((5,)).set(np.arange(5, dtype=np.float32))
    idx = cx.tensor((3,), dtype="int64").set(np.array([0, 4, 7]))
    y = data.gather(0, (idx * 1).contiguous()).retrieve()
    cx.compile(device="cpu")
    try:
        cx.execute()
        raised = False
    except Exception as e:  # noqa: BLE001  (the backend's out-of-range error, whatever its class)
        raised = "range" in str(e).lower() or "index" in str(e).lower()
    assert raised
    idx.set(np.array([0, 4, 2]))
    cx.execute()
    np.testing.assert_array_equal(y.data(), np.array([0, 4, 2], np.float32))
