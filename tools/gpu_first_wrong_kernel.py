"""Find the first kernel whose output differs between a real GPU and Triton's interpreter (GPU bring-up).

    python tools/gpu_first_wrong_kernel.py save  CASE [FILE]   # here, on the CPU (Triton's interpreter)
    python tools/gpu_first_wrong_kernel.py check CASE [FILE]   # on the GPU machine (device="cuda"), same FILE

``CASE`` is a graph builder: a name from ``CASES`` below or ``module:function`` (importable from the repository
root; ``function(cx)`` builds on the graph ``cx``, with its inputs ``set()`` to fixed data, and returns the
retrieved output tensor or a list of them). Every intermediate
buffer gets bytes of its own (the arena's sharing is turned off), so all of them survive the run; ``save`` writes
them with the output to ``FILE`` (default ``.diag/CASE.npz``; ``.diag/`` is for the device tool's ``carry``), and
``check`` runs the same graph three times on ``cuda`` and prints, per run, the first buffer (in kernel order) that
differs, the flat positions that differ and where their values sit in the interpreter's buffer (a wrong index
shows as values found at other positions). The generated Triton source goes to ``$OUT`` (or ``.``) for reading.
Found the ptxas miscompile of 2026-11-28 (docs/gpu.md). Prints; asserts nothing.
"""

from __future__ import annotations

import importlib
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def adaptive_pool(cx):
    """tests/test_nn_pooling.py's AdaptiveAvgPool2d-3: (2, 3, 9, 8) -> (4, 5)."""
    from luminal import nn
    arr = np.random.default_rng(0).standard_normal((2, 3, 9, 8)).astype(np.float32)
    return nn.AdaptiveAvgPool2d((4, 5))(cx.tensor(arr.shape).set(arr)).retrieve()


CASES = {"adaptive_pool": adaptive_pool}


def _builder(case: str):
    if case in CASES:
        return CASES[case]
    module, _, name = case.partition(":")
    if not name:
        raise SystemExit(f"unknown case {case!r}: one of {sorted(CASES)} or module:function")
    return getattr(importlib.import_module(module), name)


def _run(build, device: str):
    import luminal as lm
    from luminal.runtime import arena

    def place(intervals, align: int = 64):  # every intermediate its own bytes
        out, offset = {}, 0
        for _, _, size, node in sorted(intervals, key=lambda t: t[3]):
            out[node] = offset
            offset += (size + align - 1) // align * align
        return out, offset

    arena.place = place
    cx = lm.Graph()
    outs = build(cx)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    cx.compile(device=device)
    cx.execute()
    rt = cx.runtime
    from luminal.codegen.triton_support import storage_name
    bufs = {}
    for i, kernel in enumerate(rt.program.kernels):
        storage = storage_name(rt.program.buffers[kernel.out][1])
        bufs[f"k{i}_b{kernel.out}"] = np.array(rt.memory.download(rt._buffers[kernel.out], rt._sizes[kernel.out],
                                                                 storage))
    return [np.array(o.data()) for o in outs], bufs, rt


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] not in ("save", "check"):
        raise SystemExit(__doc__)
    mode, case = sys.argv[1], sys.argv[2]
    path = sys.argv[3] if len(sys.argv) > 3 else os.path.join(".diag", f"{case.replace(':', '_')}.npz")
    build = _builder(case)
    if mode == "save":
        outs, bufs, rt = _run(build, "gpu-interpret")
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        np.savez(path, **{f"out{i}": o for i, o in enumerate(outs)}, **bufs)
        print(f"saved {len(bufs)} buffers and {len(outs)} outputs to {path}")
        return
    want = np.load(path)
    for trial in range(3):
        outs, bufs, rt = _run(build, os.environ.get("GPU_DIAG_DEVICE", "cuda"))  # (gpu-interpret: a self-check)
        ok = all(np.allclose(o, want[f"out{i}"], 1e-4, 1e-5, equal_nan=True) for i, o in enumerate(outs))
        print(f"run {trial}: outputs {'equal' if ok else 'DIFFER'}")
        for key, have in bufs.items():
            w = want[key]
            bad = np.flatnonzero(~np.isclose(have, w, 1e-4, 1e-5, equal_nan=True))
            if len(bad):
                print(f"  first differing buffer {key} ({len(bad)} of {have.size}): positions {bad[:32].tolist()}")
                print(f"    have {have[bad[:8]].tolist()}\n    want {w[bad[:8]].tolist()}")
                print("    the values found at", [np.flatnonzero(np.isclose(w, h, 1e-6, 1e-7))[:3].tolist()
                                                  for h in have[bad[:8]]])
                break
    with open(os.path.join(os.environ.get("OUT", "."), f"{case.replace(':', '_')}_source.py"), "w") as f:
        f.write(rt.tprogram.source)


if __name__ == "__main__":
    main()
