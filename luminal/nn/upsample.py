"""``Upsample`` and the fixed-mode upsampling layers (``torch.nn.Upsample``, ``UpsamplingNearest2d``,
``UpsamplingBilinear2d``): modules around :func:`luminal.nn.functional.interpolate`, without parameters."""

from __future__ import annotations

from ..module import Module, check_graph_tensor


class Upsample(Module):
    """``torch.nn.Upsample(size=None, scale_factor=None, mode='nearest', align_corners=None,
    recompute_scale_factor=None)``: resamples the spatial dims of ``(N, C, *spatial)`` inputs."""

    def __init__(self, size=None, scale_factor=None, mode: str = "nearest", align_corners=None,
                 recompute_scale_factor=None):
        super().__init__()
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, x):
        from .functional import interpolate
        check_graph_tensor(x, type(self).__name__)
        return interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners,
                           self.recompute_scale_factor)

    def extra_repr(self) -> str:
        what = f"size={self.size}" if self.size is not None else f"scale_factor={self.scale_factor}"
        return f"{what}, mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    """``torch.nn.UpsamplingNearest2d``: ``Upsample(mode='nearest')``."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, "nearest")


class UpsamplingBilinear2d(Upsample):
    """``torch.nn.UpsamplingBilinear2d``: ``Upsample(mode='bilinear', align_corners=True)``."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, "bilinear", align_corners=True)
