"""Front ends that turn models written for other frameworks into luminal graphs.

* :mod:`luminal.frontends.torch`: PyTorch modules through ``torch.export`` (``from_torch``) and a
  ``torch.compile`` backend named ``"luminal"``. torch is imported only when that module is imported.

(The ONNX importer lives in :mod:`luminal.onnx`.)
"""
