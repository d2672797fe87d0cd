#!/usr/bin/env bash
# The GPU job on a machine with an NVIDIA GPU (see docs/gpu.md): the Triton kernels on a real device against the
# reference interpreter, a sample of the high-level-op / nn suites with device="cuda", and the GPU benchmarks.
#
#   tools/gpu_check.sh [tests|suite|bench|all] [seconds per step]
#
# Wheels that the machine lacks (egglog, scipy-openblas32 for Python 3.12) may lie in .whl/ (ignored by git);
# they are installed into /tmp/site first. Logs go to $OUT (or ./gpu_logs).
set -u
set -o pipefail
what="${1:-all}"
limit="${2:-120}"
OUT="${OUT:-gpu_logs}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 LUMINAL_CACHE_DIR=/tmp/luminal_cache
if compgen -G ".whl/*.whl" >/dev/null; then
    # installed once per machine: the script may run step by step (tests, suite, bench) with different limits
    [[ -d /tmp/site/egglog ]] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/site:$PWD"
else
    export PYTHONPATH="$PWD"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import sys, triton, cupy, torch, numpy; print('python', sys.version.split()[0], 'triton', triton.__version__, 'cupy', cupy.__version__, 'torch', torch.__version__, 'numpy', numpy.__version__)"
workers=$(( $(nproc) > 16 ? 16 : $(nproc) ))

if [[ "$what" == tests || "$what" == all ]]; then
    echo "== tests/test_gpu_interpret.py on device=cuda (full sweep)"
    LUMINAL_GPU_TEST_DEVICE=cuda LUMINAL_GPU_INTERPRET_FULL=1 timeout "$limit" python3 -m pytest -q -n "$workers" \
        -p no:cacheprovider -m "gpu or not gpu" --tb=short tests/test_gpu_interpret.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -60
fi
if [[ "$what" == suite || "$what" == all ]]; then
    echo "== hl / nn / graph sample with LUMINAL_TEST_BACKENDS=cuda"
    LUMINAL_TEST_BACKENDS=cuda timeout "$limit" python3 -m pytest -q -n "$workers" -p no:cacheprovider --tb=short \
        ${SUITE:-tests/test_nn_pooling.py tests/test_hl_movement.py tests/test_hl_movement_creation.py \
        tests/test_hl_matmul.py tests/test_hl_reduce_norm.py tests/test_hl_extra_ops.py tests/test_graph.py tests/test_nn_*.py} \
        2>&1 | tee "$OUT/suite.log" | grep -E "^(FAILED|ERROR)|passed|failed|^E " | head -80
fi
if [[ "$what" == bench || "$what" == all ]]; then
    echo "== benchmarks/gpu_workloads.py"
    timeout "$limit" python3 benchmarks/gpu_workloads.py ${BENCH_ARGS:---seconds 1 --no-compile} 2>&1 | tee "$OUT/bench.log" | tail -40
fi
