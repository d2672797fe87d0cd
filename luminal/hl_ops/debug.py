"""Debugging ops: ``print`` a tensor's values and compare them against a reference dump (``compare_file``) after
each execute. (``diff`` is ``torch.diff``, in :mod:`luminal.hl_ops.scan`.)

Both mark the tensor for retrieval (so no pass removes it) and register a hook
that runs after ``Graph.execute()`` — they work with every backend and add no
node to the graph.
"""

from __future__ import annotations

import os

import numpy as np


def _sample(values: np.ndarray) -> str:
    flat = values.reshape(-1)
    n = flat.size
    if n <= 15:
        return np.array2string(flat, precision=6, separator=", ")
    mid = n // 2
    parts = [flat[:5], flat[mid - 2:mid + 3], flat[-5:]]
    return " ... ".join(np.array2string(p, precision=6, separator=", ") for p in parts)


class DebugOps:
    """Mixin of :class:`~luminal.tensor.GraphTensor` with ``print`` and ``compare_file``."""

    def print(self, message: str = ""):
        """After each execute, print ``message``, the shape, the element count and a sample of the values."""
        self.retrieve()
        tensor = self

        def hook(graph):
            values = tensor.data()
            print(f"{message} (node {tensor.id}) shape={list(values.shape)} dtype={tensor.dtype.value} "
                  f"n={values.size}\n  {_sample(values)}\n  view: {tensor.tracker}")

        self.graph.post_execute_hooks.append(hook)
        return self

    def compare_file(self, file, atol: float = 1e-5, rtol: float = 1e-5):
        """After each execute, compare with a raw little-endian float32 file and print mismatch statistics.

        The result (``ok``, ``max_abs``, ``mean_abs``, ``p50``/``p95``/``p99``, ``worst``) is also stored in
        ``graph.diff_results[file]``.
        """
        self.retrieve()
        tensor = self
        path = os.fspath(file)

        def hook(graph):
            got = tensor.data().astype(np.float32).reshape(-1)
            if not os.path.exists(path):
                raise FileNotFoundError(f"compare_file: reference file {path!r} does not exist")
            ref = np.fromfile(path, dtype="<f4")
            report = {"file": path}
            if ref.size != got.size:
                report.update(ok=False, reason=f"size mismatch: tensor has {got.size} values, file has {ref.size}")
                print(f"DIFF {path}: {report['reason']}")
                graph.diff_results[path] = report
                return
            nan_got, nan_ref = np.isnan(got), np.isnan(ref)
            delta = np.abs(got.astype(np.float64) - ref.astype(np.float64))
            bad = ~np.isclose(got, ref, atol=atol, rtol=rtol, equal_nan=True)
            finite = np.where(np.isnan(delta), 0.0, delta)
            report.update(
                ok=not bad.any(), n_mismatch=int(bad.sum()), nan_in_tensor=int(nan_got.sum()),
                nan_in_file=int(nan_ref.sum()), max_abs=float(finite.max(initial=0.0)),
                mean_abs=float(finite.mean()) if finite.size else 0.0, sse=float(np.sum(finite ** 2)),
                p50=float(np.percentile(finite, 50)) if finite.size else 0.0,
                p95=float(np.percentile(finite, 95)) if finite.size else 0.0,
                p99=float(np.percentile(finite, 99)) if finite.size else 0.0,
                worst=[(int(i), float(got[i]), float(ref[i])) for i in np.argsort(-finite)[:10] if bad[i]])
            if report["ok"]:
                print(f"DIFF {path}: match ({got.size} values, max |diff| {report['max_abs']:.3g})")
            else:
                print(f"DIFF {path}: {report['n_mismatch']} of {got.size} values differ beyond atol={atol} "
                      f"rtol={rtol}\n  max {report['max_abs']:.4g} mean {report['mean_abs']:.4g} "
                      f"sse {report['sse']:.4g} p50 {report['p50']:.3g} p95 {report['p95']:.3g} "
                      f"p99 {report['p99']:.3g}\n  NaNs: tensor {report['nan_in_tensor']} file "
                      f"{report['nan_in_file']}\n  tensor min/max/avg {np.nanmin(got):.4g}/{np.nanmax(got):.4g}/"
                      f"{np.nanmean(got):.4g}  file {np.nanmin(ref):.4g}/{np.nanmax(ref):.4g}/{np.nanmean(ref):.4g}"
                      f"\n  worst (index, tensor, file): {report['worst']}")
            graph.diff_results[path] = report

        self.graph.post_execute_hooks.append(hook)
        return self
