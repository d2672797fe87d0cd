"""Test configuration: the high-level-op and graph suites run on both backends.

Every test in a module named ``test_hl_*``, ``test_nn_*`` or ``test_graph`` is parametrized over ``backend`` in
``("reference", "cpu")``: the ``cpu`` variant sets ``LUMINAL_DEVICE=cpu``, so each ``graph.execute()`` of an
uncompiled graph compiles it to C first. Compiled libraries go to a per-session cache folder. Every test starts
with the global generators seeded (luminal's, numpy's, and torch's when imported): modules initialize their
parameters from them, so a test's values do not depend on which tests ran before it in the same worker (a
ResNetBlock gradcheck failed once under ``-n 2``).

``LUMINAL_TEST_BACKENDS`` (comma-separated, default ``reference,cpu``) picks other backends for those suites,
e.g. ``LUMINAL_TEST_BACKENDS=gpu-interpret`` (Triton's interpreter) or ``LUMINAL_TEST_BACKENDS=cuda`` on a
machine with a GPU. ``LUMINAL_GPU_TEST_DEVICE=cuda`` points ``tests/test_gpu_interpret.py`` at a real GPU
instead of the interpreter. With either naming ``cuda``, ``TRITON_INTERPRET`` is not set.
"""

import os

import pytest

# The gpu-interpret device runs Triton's interpreter, which Triton chooses when its kernels (its own standard
# library included) are decorated: at import. torch._dynamo (the torch importer's tests) imports triton too, so
# the interpreter is chosen before any test module can import it. Nothing here runs Triton on a real GPU.
BACKENDS = [b.strip() for b in os.environ.get("LUMINAL_TEST_BACKENDS", "reference,cpu").split(",") if b.strip()]
REAL_GPU = "cuda" in BACKENDS or os.environ.get("LUMINAL_GPU_TEST_DEVICE") == "cuda"
if not REAL_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

BOTH_BACKENDS = ("test_hl_", "test_graph", "test_nn_")


def pytest_generate_tests(metafunc):
    name = metafunc.module.__name__.rsplit(".", 1)[-1]
    if name.startswith(BOTH_BACKENDS) and "backend" not in metafunc.fixturenames:
        metafunc.fixturenames.append("backend")
        metafunc.parametrize("backend", BACKENDS)


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    folder = tmp_path_factory.mktemp("luminal_cache")
    old = os.environ.get("LUMINAL_CACHE_DIR")
    os.environ["LUMINAL_CACHE_DIR"] = str(folder)
    yield folder
    if old is None:
        os.environ.pop("LUMINAL_CACHE_DIR", None)
    else:
        os.environ["LUMINAL_CACHE_DIR"] = old


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """A test's own empty library and tuning cache (``pytestmark = pytest.mark.usefixtures("fresh_cache")``)."""
    from luminal.runtime import tuning

    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path / "cache"))
    tuning._forget()
    yield
    tuning._forget()


@pytest.fixture(autouse=True)
def _seeded():
    import sys

    import numpy as np

    import luminal as lm
    lm.manual_seed(0)
    np.random.seed(0)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _device(request, monkeypatch):
    """Point uncompiled graphs at the test's ``backend`` parameter (``"reference"`` or ``"cpu"``)."""
    callspec = getattr(request.node, "callspec", None)
    device = callspec.params.get("backend") if callspec is not None else None
    if device is None:
        monkeypatch.delenv("LUMINAL_DEVICE", raising=False)
    else:
        monkeypatch.setenv("LUMINAL_DEVICE", device)
    yield device
