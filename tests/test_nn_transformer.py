"""Transformer blocks against torch.nn (weights copied by name through load_state_dict, eval mode), the MLP
helper, and LoRALinear against a numpy oracle. Tolerance: float32 rtol=1e-4, atol=1e-5."""

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.nn.blocks import LoRALinear
from luminal.nn.transformer import MLP, TransformerDecoderLayer, TransformerEncoder, TransformerEncoderLayer

RNG = np.random.default_rng(5)
TOL = dict(rtol=1e-4, atol=1e-5)


def _arr(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _run(fn, *arrays):
    cx = lm.Graph()
    ts = [cx.tensor(a.shape).set(a) for a in arrays]
    out = fn(*ts).retrieve()
    cx.execute()
    return out.data()


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_matches_torch(norm_first, activation):
    torch.manual_seed(0)
    t = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, activation=activation, norm_first=norm_first,
                                         batch_first=True).eval()
    m = TransformerEncoderLayer(8, 2, dim_feedforward=16, activation=activation, norm_first=norm_first,
                                batch_first=True).eval()
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in t.named_parameters()]
    m.load_state_dict(t.state_dict())
    x = _arr(2, 5, 8)
    with torch.no_grad():
        want = t(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(_run(m, x), want, **TOL)


def test_decoder_layer_and_encoder_stack_match_torch():
    torch.manual_seed(1)
    td = torch.nn.TransformerDecoderLayer(8, 2, dim_feedforward=12).eval()
    md = TransformerDecoderLayer(8, 2, dim_feedforward=12).eval()
    md.load_state_dict(td.state_dict())
    tgt, mem = _arr(4, 2, 8), _arr(6, 2, 8)
    with torch.no_grad():
        want = td(torch.from_numpy(tgt), torch.from_numpy(mem), tgt_is_causal=True,
                  tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(4)).numpy()
    got = _run(lambda a, b: md(a, b, tgt_is_causal=True), tgt, mem)
    np.testing.assert_allclose(got, want, **TOL)

    te = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, 12), 2, enable_nested_tensor=False).eval()
    me = TransformerEncoder(TransformerEncoderLayer(8, 2, 12), 2).eval()
    assert [n for n, _ in me.named_parameters()] == [n for n, _ in te.named_parameters()]
    me.load_state_dict(te.state_dict())
    x = _arr(5, 3, 8)
    with torch.no_grad():
        want = te(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(_run(me, x), want, **TOL)


def test_mlp_helper():
    m = MLP(6, 10, 4, activation="relu")
    x = _arr(3, 6)
    h = np.maximum(x @ m.fc1.weight.data.T + m.fc1.bias.data, 0)
    np.testing.assert_allclose(_run(m, x), h @ m.fc2.weight.data.T + m.fc2.bias.data, **TOL)


def test_lora_linear_starts_as_base_and_merges_exactly():
    m = LoRALinear(6, 4, rank=2, alpha=4.0)
    x = _arr(3, 6)
    base = x @ m.base.weight.data.T + m.base.bias.data
    np.testing.assert_allclose(_run(m, x), base, **TOL)  # B is zero-initialized
    m.lora_B.copy_(_arr(4, 2))
    delta = (m.lora_B.data @ m.lora_A.data) * (4.0 / 2)
    want = x @ (m.base.weight.data + delta).T + m.base.bias.data
    np.testing.assert_allclose(_run(m, x), want, **TOL)
    w0 = m.base.weight.data.copy()
    m.merge()
    np.testing.assert_allclose(_run(m, x), want, **TOL)
    m.unmerge()
    np.testing.assert_allclose(m.base.weight.data, w0, rtol=0, atol=1e-6)
    assert [n for n, _ in m.named_parameters()] == ["lora_A", "lora_B", "base.weight", "base.bias"]


@pytest.mark.parametrize("cin,cout", [(4, 4), (4, 8)])
def test_resnet_block_matches_torch_construction(cin, cout):
    from luminal.nn import ResNetBlock

    class TorchResNetBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = torch.nn.GroupNorm(2, cin, eps=1e-6)
            self.conv1 = torch.nn.Conv2d(cin, cout, 3, padding=1)
            self.norm2 = torch.nn.GroupNorm(2, cout, eps=1e-6)
            self.conv2 = torch.nn.Conv2d(cout, cout, 3, padding=1)
            self.shortcut = torch.nn.Conv2d(cin, cout, 1) if cin != cout else torch.nn.Identity()

        def forward(self, x):
            h = self.conv1(torch.nn.functional.silu(self.norm1(x)))
            h = self.conv2(torch.nn.functional.silu(self.norm2(h)))
            return self.shortcut(x) + h

    torch.manual_seed(2)
    t = TorchResNetBlock()
    m = ResNetBlock(cin, cout, groups=2)
    m.load_state_dict(t.state_dict())
    x = _arr(2, cin, 6, 6)
    with torch.no_grad():
        want = t(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(_run(m, x), want, **TOL)
