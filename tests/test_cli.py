"""The ``luminal`` command line (``python -m luminal``): info, demo, bench, cache, run; errors are one line with
exit status 2. Oracles: /proc/cpuinfo, the tuning file's own content, numpy, onnxruntime."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from luminal.cli import main


def run_cli(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "luminal", *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})))


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    folder.mkdir()
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(folder))
    return folder


def test_info_reports_version_devices_and_cpu_features(cache):
    import luminal

    out = run_cli("info", env={"LUMINAL_CACHE_DIR": str(cache)})
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert f"luminal {luminal.__version__}" in text
    assert "devices: reference, cpu" in text
    assert f"{os.cpu_count()} logical cores" in text
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    line = next(ln for ln in text.splitlines() if ln.startswith("CPU:"))
    for feat in ("avx2", "fma", "avx512f"):
        assert (f" {feat}" in line) == (feat in flags), (feat, line)
    assert f"cache: {cache} (0 compiled libraries" in text
    # the C compiler's own --version banner and the installed OpenBLAS wheel's version (importlib.metadata)
    import shutil
    from importlib import metadata
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc:
        banner = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.splitlines()[0].strip()
        assert f"C compiler: {banner}" in text, text
    try:
        blas = metadata.version("scipy-openblas32")
    except metadata.PackageNotFoundError:
        assert "BLAS: none" in text
    else:
        assert f"BLAS: OpenBLAS from scipy-openblas32 {blas}" in text, text


def test_demo_matches_numpy(cache):
    out = run_cli("demo", "--device", "reference", env={"LUMINAL_CACHE_DIR": str(cache)})
    assert out.returncode == 0, out.stderr
    assert "ok: matches numpy" in out.stdout and "batch  32: output (32, 10)" in out.stdout


def test_cache_list_clear_export_import(cache, tmp_path, capsys):
    import luminal as lm
    from luminal.runtime import tuning

    cx = lm.Graph()
    (cx.tensor((3,)).set(np.ones(3, np.float32)).exp2()).retrieve()
    cx.compile(device="cpu")
    tuning.store("test:kernel", {"choice": "blas", "seconds": 1e-4, "candidates": {"blas": 1e-4}})
    assert main(["cache", "list"]) == 0
    text = capsys.readouterr().out
    n_libs = len([n for n in os.listdir(cache) if n.endswith(".so")])
    assert n_libs >= 1 and f"{n_libs} compiled libraries" in text
    assert "tunings for this machine: 1" in text and "test:kernel: blas (100.0 us)" in text

    exported = tmp_path / "t.json"
    assert main(["cache", "export", str(exported)]) == 0
    data = json.loads(exported.read_text())
    (m,) = data["machines"].values()
    assert m["entries"]["test:kernel"]["choice"] == "blas"

    assert main(["cache", "clear", "--tunings"]) == 0
    assert not [n for n in os.listdir(cache) if n.endswith(".so")]
    assert tuning.lookup("test:kernel") is None
    capsys.readouterr()
    assert main(["cache", "import", str(exported)]) == 0
    assert "imported 1 tunings" in capsys.readouterr().out
    assert tuning.lookup("test:kernel")["choice"] == "blas"


def test_cache_import_errors(cache, tmp_path, capsys):
    assert main(["cache", "import", str(tmp_path / "missing.json")]) == 2
    assert "missing.json: no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["cache", "import", str(bad)]) == 2
    assert "is not a tuning file" in capsys.readouterr().err
    assert main(["cache", "export"]) == 2
    assert "needs a FILE" in capsys.readouterr().err


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path_factory.mktemp("onnx") / "mlp.onnx"
    onnx.save(model, str(path))
    return path, w


@pytest.mark.parametrize("device", ["reference", "cpu"])
def test_run_onnx_with_an_input_file(onnx_model, tmp_path, cache, capsys, device):
    path, w = onnx_model
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.npz"
    assert main(["run", str(path), "--input", f"x={tmp_path / 'x.npy'}", "--device", device,
                 "--save", str(out)]) == 0
    assert "output y: float32 (5, 3)" in capsys.readouterr().out
    np.testing.assert_allclose(np.load(out)["y"], np.maximum(x @ w, 0), rtol=1e-5, atol=1e-6)


def test_run_onnx_random_inputs_and_errors(onnx_model, tmp_path, cache, capsys):
    path, _ = onnx_model
    assert main(["run", str(path), "--device", "reference"]) == 2  # "batch" has no size
    assert "--dim batch=N" in capsys.readouterr().err
    assert main(["run", str(path), "--device", "reference", "--dim", "batch=2"]) == 0
    assert "input x: random float32 (2, 4)" in capsys.readouterr().out
    assert main(["run", str(tmp_path / "nope.onnx")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["run", str(path), "--input", "z=a.npy"]) == 2
    assert "no input of that name" in capsys.readouterr().err
    assert main(["run", str(path), "--dim", "batch"]) == 2
    assert "expects NAME=VALUE" in capsys.readouterr().err
    not_onnx = tmp_path / "garbage.onnx"
    not_onnx.write_bytes(b"\x00\x01garbage")
    assert main(["run", str(not_onnx), "--device", "reference"]) == 1
    assert "garbage.onnx" in capsys.readouterr().err


def test_bench_prints_a_table_checked_against_numpy(cache):
    out = run_cli("bench", "--quick", "--sizes", "64", env={"LUMINAL_CACHE_DIR": str(cache)})
    assert out.returncode == 0, out.stderr
    assert "gemm: 100%" in out.stderr  # the progress bar (tqdm, on stderr)
    rows = [ln for ln in out.stdout.splitlines() if ln.startswith(("GEMM", "MLP"))]
    assert len(rows) == 2
    for row in rows:
        assert float(row.split()[-1]) < 1e-4  # the relative error against numpy, last column


def test_unknown_command_is_an_argparse_error():
    out = run_cli("frobnicate")
    assert out.returncode == 2 and "invalid choice" in out.stderr


def test_run_fills_bfloat16_inputs_with_normal_values(tmp_path, cache, capsys):
    """``luminal run`` on a bfloat16 model draws its random input from a normal distribution, as for other
    floats (bfloat16's numpy type is not an ``np.floating`` subtype), and prints the output's statistics."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [64])],
                              [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [64])])
    path = tmp_path / "bf16.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    out_file = tmp_path / "out.npz"
    assert main(["run", str(path), "--device", "reference", "--save", str(out_file)]) == 0
    text = capsys.readouterr().out
    assert "input x: random bfloat16 (64,)" in text
    assert "output y: bfloat16 (64,) min" in text
    import ml_dtypes
    y = np.load(out_file)["y"]
    if y.dtype.kind == "V":  # .npz keeps bfloat16 as its raw 2-byte records
        y = y.view(ml_dtypes.bfloat16)
    y = y.astype(np.float32)
    assert np.any(y != np.round(y))  # normal draws doubled: not integers (random integers would be)
