"""Cold and cached compile time of the W6 graph on the CPU backend (graph build + passes + lowering + C).

Run:  python benchmarks/compile_time.py
"""

import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = """
import sys, time
sys.path.insert(0, {here!r})
t0 = time.perf_counter()
from workloads import transformer_layer
from luminal.compiler import GenericCompiler
cx, x, y, params = transformer_layer(batch=1)
t1 = time.perf_counter()
cx.compile(GenericCompiler(), y, device="cpu")
t2 = time.perf_counter()
cx.execute()
t3 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2)
"""


def main() -> None:
    cache = tempfile.mkdtemp()
    env = dict(os.environ, LUMINAL_CACHE_DIR=cache)
    rows = {"cold": [], "cached": []}
    for trial in range(3):
        for kind in ("cold", "cached"):
            if kind == "cold":
                for f in os.listdir(cache):
                    os.unlink(os.path.join(cache, f))
            out = subprocess.run([sys.executable, "-c", CHILD.format(here=HERE)], env=env, capture_output=True,
                                 text=True, check=True).stdout.split()
            rows[kind].append(tuple(float(v) for v in out))
    print(f"{'W6 compile':<12}{'build graph ms':>16}{'compile ms':>12}{'first execute ms':>18}")
    for kind, vals in rows.items():
        med = [statistics.median(v[i] for v in vals) * 1e3 for i in range(3)]
        print(f"{kind:<12}{med[0]:>16.1f}{med[1]:>12.1f}{med[2]:>18.1f}")


if __name__ == "__main__":
    main()
