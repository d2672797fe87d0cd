"""``luminal.nn.utils`` (clip_grad_norm_, clip_grad_value_, parameters_to_vector, vector_to_parameters) in an
eager loop, against ``torch.nn.utils`` on the same model and batch: gradients after clipping and the returned
total norm within rtol 1e-5 (float32)."""

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.nn as nn
import luminal.nn.functional as F


def _pair(seed=0):
    nn.init.manual_seed(seed)
    m = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))
    tm = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3))
    tm.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in m.state_dict().items()})
    x = np.random.default_rng(seed).standard_normal((5, 4)).astype(np.float32) * 3
    y = np.array([0, 2, 1, 1, 0])
    F.cross_entropy(m(lm.tensor(x)), lm.tensor(y)).backward()
    torch.nn.functional.cross_entropy(tm(torch.from_numpy(x)), torch.from_numpy(y)).backward()
    return m, tm


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf"), 3.0])
def test_clip_grad_norm_matches_torch(norm_type):
    m, tm = _pair()
    total = nn.utils.clip_grad_norm_(m.parameters(), 0.05, norm_type)
    ttotal = torch.nn.utils.clip_grad_norm_(tm.parameters(), 0.05, norm_type)
    np.testing.assert_allclose(float(total), float(ttotal), rtol=1e-5)
    for p, tp in zip(m.parameters(), tm.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_clip_grad_value_and_vectors_match_torch():
    m, tm = _pair(1)
    nn.utils.clip_grad_value_(m.parameters(), 0.01)
    torch.nn.utils.clip_grad_value_(tm.parameters(), 0.01)
    for p, tp in zip(m.parameters(), tm.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-7)
    vec = nn.utils.parameters_to_vector(m.parameters())
    tvec = torch.nn.utils.parameters_to_vector(tm.parameters())
    np.testing.assert_allclose(vec.numpy(), tvec.detach().numpy(), rtol=1e-6)
    nn.utils.vector_to_parameters(vec.numpy() * 2, m.parameters())
    torch.nn.utils.vector_to_parameters(tvec.detach() * 2, tm.parameters())
    for p, tp in zip(m.parameters(), tm.parameters()):
        np.testing.assert_allclose(p.data, tp.detach().numpy(), rtol=1e-6)


def test_clip_grad_norm_errors():
    m, _ = _pair(2)
    with pytest.raises(TypeError, match="Parameters"):
        nn.utils.clip_grad_norm_([np.ones(3)], 1.0)
    m[0].weight.grad = m[0].weight.grad * float("nan")
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_(m.parameters(), 1.0, error_if_nonfinite=True)
    with pytest.raises(ValueError, match="vector has 3 elements"):
        nn.utils.vector_to_parameters(np.ones(3), m.parameters())


def test_functional_takes_eager_tensors_on_the_first_eager_call():
    """``F.relu(lm.tensor(x))`` as a program's first eager call: ``F.relu`` is looked up before ``lm.tensor``
    imports the eager layer (a fresh interpreter, since this one has imported it already)."""
    import subprocess
    import sys
    code = ("import numpy as np, luminal as lm, luminal.nn.functional as F\n"
            "print(F.relu(lm.tensor(np.array([-1.0, 2.0]))).numpy().tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[0.0, 2.0]"
