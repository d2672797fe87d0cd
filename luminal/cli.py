"""The ``luminal`` command line (also ``python -m luminal``).

Commands::

    luminal info                      version, devices, C compiler, BLAS, CPU features, caches
    luminal demo                      a small model compiled for the CPU, checked against numpy, timed
    luminal bench [--quick]           GEMM and MLP timings: luminal cpu vs numpy (and PyTorch when installed)
    luminal cache list                compiled libraries and tunings in the cache folder
    luminal cache clear [--tunings]   delete the compiled libraries (and this machine's tunings)
    luminal cache export FILE         write this machine's tunings to FILE
    luminal cache import FILE         merge tunings from FILE
    luminal run MODEL.onnx [--input NAME=FILE.npy ...] [--dim SYMBOL=N ...] [--device cpu] [--save OUT.npz]

Every error is one line on stderr naming what was wrong, and exit status 2 (1 for a failure while running).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


# ----------------------------------------------------------------------------------------------- info
def _cpu_features() -> list[str]:
    from .runtime.tuning import _cpu_description

    flags = set(_cpu_description()[1].split())
    wanted = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "amx_tile", "neon",
              "asimd")
    return [f for f in wanted if f in flags]


def _folder_size(path: str) -> tuple[int, int]:
    n = size = 0
    try:
        for name in os.listdir(path):
            if name.endswith(".so"):
                n += 1
            try:
                size += os.path.getsize(os.path.join(path, name))
            except OSError:
                pass
    except OSError:
        pass
    return n, size


def _optional_version(distribution: str) -> str:
    """The installed version of a package (not imported: ``info`` stays fast), or "not installed"."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def info_lines() -> list[str]:
    """What ``luminal info`` prints, one line each."""
    from . import __version__
    from .codegen.toolchain import find_compiler
    from .runtime import tuning
    from .runtime.build import _blas, cache_dir

    cc = find_compiler()
    model, _ = tuning._cpu_description()
    blas = _blas()
    if blas is None:
        blas_text = "none (scipy-openblas32 not installed: GEMMs use luminal's own kernels)"
    else:
        import scipy_openblas32 as sob
        blas_text = f"OpenBLAS from scipy-openblas32 {getattr(sob, '__version__', '?')}"
    coretype = os.environ.get("OPENBLAS_CORETYPE") or "(unset)"
    devices = ["reference"] + (["cpu"] if cc else [])
    folder = cache_dir()
    n_libs, size = _folder_size(folder)
    try:
        data = tuning._read(tuning.tuning_path(), warn=False)
        n_tunings = len(data["machines"].get(tuning.machine()[0], {}).get("entries", {}))
    except Exception:  # a broken tuning file must not break `info`
        n_tunings = 0
    search = os.environ.get("LUMINAL_SEARCH") or "off"
    return [
        f"luminal {__version__} (Python {platform.python_version()}, numpy {np.__version__})",
        f"devices: {', '.join(devices)}" + ("" if cc else "  (no C compiler found: set CC or install gcc)")
        + "; cuda: not available in this version",
        f"C compiler: {tuning._compiler_version() if cc else 'none'}" + (f" ({cc})" if cc else ""),
        f"BLAS: {blas_text}; OPENBLAS_CORETYPE={coretype}",
        f"CPU: {model}; {os.cpu_count()} logical cores; features: {' '.join(_cpu_features()) or 'none detected'}",
        f"threads: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS') or '(unset)'}",
        f"compiler: equality saturation (egglog {_optional_version('egglog')}); measured search: {search} "
        "(LUMINAL_SEARCH)",
        f"cache: {folder} ({n_libs} compiled libraries, {size / 2**20:.1f} MiB; {n_tunings} tunings for this machine)",
        f"optional: torch {_optional_version('torch')}, onnx {_optional_version('onnx')}",
    ]


def cmd_info(args) -> int:
    print("\n".join(info_lines()))
    return 0


# ----------------------------------------------------------------------------------------------- demo
def cmd_demo(args) -> int:
    """An MLP with a symbolic batch, compiled for the CPU, checked against numpy at two batch sizes."""
    import luminal as lm

    device = args.device
    rng = np.random.default_rng(0)
    w1, b1 = rng.standard_normal((64, 128)).astype(np.float32) * 0.1, np.zeros(128, np.float32)
    w2 = rng.standard_normal((128, 10)).astype(np.float32) * 0.1
    cx = lm.Graph()
    x = cx.tensor(("batch", 64))
    y = ((x @ cx.tensor((64, 128)).set(w1) + cx.tensor((128,)).set(b1)).relu()
         @ cx.tensor((128, 10)).set(w2)).softmax(-1).retrieve()
    t0 = time.perf_counter()
    cx.compile(device=device)
    print(f"compiled a 2-layer MLP with a symbolic batch for device={device!r} in {time.perf_counter() - t0:.2f} s")
    worst = 0.0
    for batch in (1, 32):
        data = rng.standard_normal((batch, 64)).astype(np.float32)
        x.set(data)
        cx.execute()
        h = np.maximum(data.astype(np.float64) @ w1 + b1, 0) @ w2
        ref = np.exp(h - h.max(-1, keepdims=True))
        ref /= ref.sum(-1, keepdims=True)
        diff = float(np.abs(y.data() - ref).max())
        worst = max(worst, diff)
        runs = 200
        t0 = time.perf_counter()
        for _ in range(runs):
            cx.execute()
        us = (time.perf_counter() - t0) / runs * 1e6
        print(f"batch {batch:>3}: output {tuple(y.data().shape)}, max |luminal - numpy| = {diff:.1e}, "
              f"{us:.1f} us per call")
    if worst > 1e-5:
        print(f"error: the result differs from numpy by {worst:.1e} (> 1e-5)", file=sys.stderr)
        return 1
    print("ok: matches numpy (float64) within 1e-5")
    return 0


# ----------------------------------------------------------------------------------------------- bench
def _time(fn, seconds: float) -> float:
    fn()
    best = float("inf")
    end = time.perf_counter() + seconds
    while True:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        if time.perf_counter() > end:
            return best


def cmd_bench(args) -> int:
    """Square GEMMs and an MLP forward: luminal cpu vs numpy vs PyTorch (when installed); min over repeats."""
    import luminal as lm

    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is a dependency, but the table matters more than the bar
        def tqdm(it, **_):
            return it
    try:
        import torch
        torch.set_num_threads(os.cpu_count() or 1)
    except Exception:
        torch = None
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else ([256, 512] if args.quick else [256, 1024, 2048])
    seconds = 0.2 if args.quick else 1.0
    rows = []
    rng = np.random.default_rng(0)
    for n in tqdm(sizes, desc="gemm", leave=False):
        a = rng.standard_normal((n, n)).astype(np.float32)
        b = rng.standard_normal((n, n)).astype(np.float32)
        cx = lm.Graph()
        ta, tb = cx.tensor((n, n)).set(a), cx.tensor((n, n)).set(b)
        out = (ta @ tb).retrieve()
        cx.compile(device="cpu")
        flops = 2.0 * n ** 3
        cols = {"luminal": flops / _time(cx.execute, seconds) / 1e9,
                "numpy": flops / _time(lambda: a @ b, seconds) / 1e9}
        if torch is not None:
            ta_, tb_ = torch.from_numpy(a), torch.from_numpy(b)
            cols["torch"] = flops / _time(lambda: ta_ @ tb_, seconds) / 1e9
        cx.execute()
        err = float(np.abs(out.data() - a @ b).max() / max(np.abs(a @ b).max(), 1e-30))
        rows.append((f"GEMM {n}x{n}x{n} (GFLOP/s, higher is better)", cols, err))
    batch = 64 if args.quick else 256
    x = rng.standard_normal((batch, 784)).astype(np.float32)
    ws = [rng.standard_normal(s).astype(np.float32) * 0.05 for s in ((784, 512), (512, 512), (512, 10))]
    cx = lm.Graph()
    h = cx.tensor((batch, 784)).set(x)
    for i, w in enumerate(ws):
        h = h @ cx.tensor(w.shape).set(w)
        if i < 2:
            h = h.relu()
    out = h.retrieve()
    cx.compile(device="cpu")

    def np_mlp():
        return np.maximum(np.maximum(x @ ws[0], 0) @ ws[1], 0) @ ws[2]

    cols = {"luminal": _time(cx.execute, seconds) * 1e3, "numpy": _time(np_mlp, seconds) * 1e3}
    if torch is not None:
        tx, tw = torch.from_numpy(x), [torch.from_numpy(w) for w in ws]
        with torch.no_grad():
            cols["torch"] = _time(lambda: torch.relu(torch.relu(tx @ tw[0]) @ tw[1]) @ tw[2], seconds) * 1e3
    cx.execute()
    ref = np_mlp()
    rows.append((f"MLP 784-512-512-10 forward, batch {batch} (ms, lower is better)", cols,
                 float(np.abs(out.data() - ref).max() / np.abs(ref).max())))
    names = ["luminal", "numpy"] + (["torch"] if torch is not None else [])
    print(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE') or '(unset)'}, {os.cpu_count()} cores; "
          "min over repeats")
    print(f"{'workload':<58}" + "".join(f"{n:>10}" for n in names) + f"{'rel err':>10}")
    for label, cols, err in rows:
        print(f"{label:<58}" + "".join(f"{cols[n]:>10.2f}" for n in names) + f"{err:>10.1e}")
    return 0


# ----------------------------------------------------------------------------------------------- cache
def cmd_cache(args) -> int:
    from .runtime import tuning
    from .runtime.build import cache_dir

    folder = cache_dir()
    if args.action == "list":
        libs = sorted((n for n in os.listdir(folder) if n.endswith(".so")),
                      key=lambda n: os.path.getmtime(os.path.join(folder, n)), reverse=True)
        _, size = _folder_size(folder)
        print(f"{folder}: {len(libs)} compiled libraries, {size / 2**20:.1f} MiB")
        for name in libs[:args.limit]:
            path = os.path.join(folder, name)
            age = time.time() - os.path.getmtime(path)
            print(f"  {name}  {os.path.getsize(path) / 1024:.0f} KiB  {age / 3600:.1f} h ago")
        if len(libs) > args.limit:
            print(f"  ... {len(libs) - args.limit} more (--limit N)")
        data = tuning._read(tuning.tuning_path(), warn=False)
        entries = data["machines"].get(tuning.machine()[0], {}).get("entries", {})
        print(f"tunings for this machine: {len(entries)} ({tuning.tuning_path()})")
        for key in sorted(entries)[:args.limit]:
            e = entries[key]
            print(f"  {key}: {e['choice']} ({e['seconds'] * 1e6:.1f} us)")
        return 0
    if args.action == "clear":
        removed = 0
        for name in os.listdir(folder):
            if name.startswith("luminal_") and name.endswith((".so", ".so.sig", ".c", ".failed.c")):
                try:
                    os.remove(os.path.join(folder, name))
                    removed += 1
                except FileNotFoundError:
                    pass
        print(f"removed {removed} files from {folder}")
        if args.tunings:
            tuning.clear()
            print("cleared this machine's tunings")
        return 0
    if args.action == "export":
        if not args.file:
            raise CliError("cache export needs a FILE to write")
        n = tuning.export_tunings(args.file)
        print(f"wrote {n} tunings to {args.file}")
        return 0
    if args.action == "import":
        if not args.file:
            raise CliError("cache import needs a FILE to read")
        if not os.path.isfile(args.file):
            raise CliError(f"{args.file}: no such file (expected a tuning file written by `luminal cache export`)")
        try:
            n = tuning.import_tunings(args.file, overwrite=args.overwrite)
        except ValueError as err:
            raise CliError(str(err)) from None
        print(f"imported {n} tunings from {args.file}")
        return 0
    raise CliError(f"unknown cache action {args.action!r}")  # argparse's choices prevent this


# ----------------------------------------------------------------------------------------------- run
def _pairs(items, what: str) -> dict:
    out = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise CliError(f"--{what} expects NAME=VALUE, got {item!r}")
        out[name] = value
    return out


def cmd_run(args) -> int:
    """Run an ONNX model on given (.npy) or random inputs; print each output's shape and statistics."""
    try:
        from . import onnx as lonnx
    except ImportError as err:
        raise CliError(f"`luminal run` needs the onnx package ({err}); install it with pip install 'luminal[onnx]'")
    if not os.path.isfile(args.model):
        raise CliError(f"{args.model}: no such file (expected an .onnx model)")
    dims = {}
    for name, value in _pairs(args.dim, "dim").items():
        try:
            dims[name] = int(value)
        except ValueError:
            raise CliError(f"--dim {name}={value}: expected an integer size") from None
    files = _pairs(args.input, "input")
    model = lonnx.load(args.model, device=args.device)
    unknown = sorted(set(files) - set(model.inputs))
    if unknown:
        raise CliError(f"--input {unknown[0]}: the model has no input of that name (inputs: {sorted(model.inputs)})")
    rng = np.random.default_rng(args.seed)
    feeds = {}
    for name, t in model.inputs.items():
        if name in files:
            try:
                feeds[name] = np.load(files[name], allow_pickle=False)
            except (OSError, ValueError) as err:
                raise CliError(f"--input {name}={files[name]}: cannot read it as a .npy array ({err})") from None
            continue
        shape = []
        for d in t.dims:
            if d.is_constant():
                shape.append(d.to_int())
                continue
            free = sorted(d.symbols() - set(dims))
            if free:
                raise CliError(f"input {name!r} has the symbolic dim {d}: give its size with --dim {free[0]}=N "
                               "(or pass the input with --input)")
            shape.append(d.evaluate(dims))
        dtype = t.dtype.numpy
        if t.dtype.is_float:  # (bfloat16's numpy type is not an np.floating subtype)
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[name] = rng.integers(0, 2, shape).astype(bool)
        else:
            feeds[name] = rng.integers(0, 10, shape).astype(dtype)
        print(f"input {name}: random {dtype.__name__ if hasattr(dtype, '__name__') else dtype} {tuple(shape)}")
    t0 = time.perf_counter()
    outputs = model(**feeds)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    outputs = model(**feeds)
    again = time.perf_counter() - t0
    if isinstance(outputs, dict):
        named = outputs
    else:
        outs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        named = dict(zip(model.outputs, outs))
    for name, value in named.items():
        v = np.asarray(value)
        numeric = np.issubdtype(v.dtype, np.number) or v.dtype.name == "bfloat16"
        stats = f"min {float(v.min()):.4g} max {float(v.max()):.4g} mean {v.astype(np.float64).mean():.4g}" \
            if v.size and numeric else ""
        print(f"output {name}: {v.dtype} {tuple(v.shape)} {stats}")
    print(f"first call (compile + run) {first * 1e3:.1f} ms, second call {again * 1e3:.2f} ms, device={args.device}")
    if args.save:
        from .io.atomic import atomic_save

        def write(tmp: str) -> None:
            with open(tmp, "wb") as f:  # a file object: np.savez would append .npz to a temporary's name
                np.savez(f, **{k: np.asarray(v) for k, v in named.items()})

        atomic_save(args.save, write)
        print(f"saved outputs to {args.save}")
    return 0


# ----------------------------------------------------------------------------------------------- main
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="luminal", description="luminal: a deep-learning compiler (command line)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    s = sub.add_parser("info", help="version, devices, compiler, BLAS, CPU features, caches")
    s.set_defaults(fn=cmd_info)
    s = sub.add_parser("demo", help="compile a small model, check it against numpy, time it")
    s.add_argument("--device", default="cpu", choices=["cpu", "reference"])
    s.set_defaults(fn=cmd_demo)
    s = sub.add_parser("bench", help="GEMM and MLP timings against numpy and PyTorch")
    s.add_argument("--quick", action="store_true", help="small sizes, short timings")
    s.add_argument("--sizes", help="comma-separated GEMM sizes, e.g. 256,1024")
    s.set_defaults(fn=cmd_bench)
    s = sub.add_parser("cache", help="list, clear, export or import the compiled-library and tuning caches")
    s.add_argument("action", choices=["list", "clear", "export", "import"])
    s.add_argument("file", nargs="?", help="the tuning file (export / import)")
    s.add_argument("--tunings", action="store_true", help="clear: also forget this machine's tunings")
    s.add_argument("--overwrite", action="store_true", help="import: replace existing entries")
    s.add_argument("--limit", type=int, default=20, help="list: how many entries to show")
    s.set_defaults(fn=cmd_cache)
    s = sub.add_parser("run", help="run an ONNX model on .npy or random inputs")
    s.add_argument("model", help="the .onnx file")
    s.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="an input from a .npy file")
    s.add_argument("--dim", action="append", metavar="SYMBOL=N", help="the size of a symbolic dim")
    s.add_argument("--device", default="cpu", choices=["cpu", "reference"])
    s.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    s.add_argument("--save", metavar="OUT.npz", help="write the outputs to an .npz file")
    s.set_defaults(fn=cmd_run)
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.fn(args)
    except CliError as err:
        print(f"luminal {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # a failure while running: one line, not a traceback (LUMINAL_DEBUG=1 shows it)
        if os.environ.get("LUMINAL_DEBUG", "0") not in ("", "0"):
            raise
        print(f"luminal {args.command}: {type(err).__name__}: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
