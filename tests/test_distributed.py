"""luminal.distributed: 2 MPI ranks (``mpiexec`` subprocesses with a timeout) against single-process oracles.

The same file is the ranks' script: ``mpiexec -n 2 python tests/test_distributed.py SCENARIO OUTDIR``.

* ``train``: ranks start from *different* initial weights (seed = rank); ``Trainer(distributed=True)`` broadcasts
  rank 0's; 20 steps (2 epochs of 10) of SGD+momentum and of Adam on a DistributedDataLoader (per-rank batch 8).
  The oracle is single-process ``Trainer`` on the concatenated global batches (rank 0's shard + rank 1's, taken
  from DistributedSampler(rank=0/1) directly). Tolerance: ``rtol=1e-4, atol=2e-5`` on float32 parameters of
  magnitude ~0.5 (the sum of two half-batch means differs from the full-batch mean by rounding only: 1.2e-7
  observed); the two ranks' parameters must be bitwise equal. Adam runs with one all-reduce bucket per
  parameter, SGD with one bucket. A fresh trainer then resumes from rank 0's checkpoint (rank 1 has no file).
* ``raise``: rank 1 raises inside ``fit`` at its 3rd batch while rank 0 waits in the all-reduce; mpiexec must
  exit non-zero with rank 1's message well before the timeout (the library calls ``MPI_Abort``).
* ``mismatch``: the ranks' loaders have 8 and 9 batches: a clear error instead of a hang in the 9th step.
* ``uncaught``: rank 1 raises outside any trainer call while rank 0 waits in a barrier: the excepthook that
  ``Trainer(distributed=True)`` installs aborts all ranks.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

N_SAMPLES, FEATURES, CLASSES, BATCH, EPOCHS = 160, 6, 3, 8, 2
TIMEOUT_S = 120


def _data():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((N_SAMPLES, FEATURES)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5).astype(np.int64)
    return x, y


def _model(seed):
    import luminal.nn as nn
    nn.init.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, 16), nn.ReLU(), nn.Linear(16, CLASSES))


def _optimizer(kind, model):
    from luminal.training import SGD, Adam
    if kind == "sgd":
        return SGD(model.parameters(), lr=0.1, momentum=0.9)
    return Adam(model.parameters(), lr=0.01)


def _params(model):
    return {k: np.array(v) for k, v in model.state_dict().items()}


# ---------------------------------------------------------------------------- the ranks' side
def _rank_train(outdir):
    import luminal.nn.functional as F
    from luminal.data import TensorDataset
    from luminal.distributed import DistributedDataLoader, world
    from luminal.training import Trainer

    comm = world()
    r = comm.Get_rank()
    # buffers (BatchNorm's running statistics, a 0-d counter) are broadcast with the parameters
    import luminal.nn as nn
    from luminal.distributed import broadcast_parameters
    bn = nn.BatchNorm1d(4)
    bn.running_mean.copy_(np.full(4, 10.0 + r, np.float32))
    bn.num_batches_tracked.copy_(np.array(5 + r, bn.num_batches_tracked.dtype.numpy))
    broadcast_parameters(bn)
    np.savez(os.path.join(outdir, f"bn_rank{r}.npz"), **{k: np.array(v) for k, v in bn.state_dict().items()})
    x, y = _data()
    for kind in ("sgd", "adam"):
        model = _model(seed=r)  # different on each rank: the trainer must broadcast rank 0's
        before = _params(model)
        opt = _optimizer(kind, model)
        # Adam: tiny buckets (one per parameter: 4 Iallreduce in flight per step); SGD: one bucket
        trainer = Trainer(model, opt, F.cross_entropy, distributed=True,
                          bucket_cap_mb=1e-4 if kind == "adam" else 25.0)
        after_bcast = _params(model)
        loader = DistributedDataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True, seed=3)
        ckpt = os.path.join(outdir, f"{kind}_rank{r}.ckpt.npz")
        hist = trainer.fit(loader, epochs=EPOCHS, checkpoint=ckpt, progress=True)  # rank 1 must neither print nor diverge
        # resume into a fresh trainer: rank 0 finds and reads its checkpoint, rank 1 (whose path was never
        # written) receives the state by broadcast; the epochs are done, so nothing trains
        model2 = _model(seed=10 + r)
        trainer2 = Trainer(model2, _optimizer(kind, model2), F.cross_entropy, distributed=True)
        trainer2.fit(loader, epochs=EPOCHS, checkpoint=ckpt, resume=True, progress=False)
        np.savez(os.path.join(outdir, f"{kind}_rank{r}.npz"),
                 **{f"resumed/{k}": v for k, v in _params(model2).items()},
                 resumed_epoch=np.array(trainer2.epoch), resumed_steps=np.array(trainer2.global_step),
                 **{f"before/{k}": v for k, v in before.items()},
                 **{f"bcast/{k}": v for k, v in after_bcast.items()},
                 **{f"final/{k}": v for k, v in _params(model).items()},
                 losses=np.array([h["loss"] for h in hist]), accuracy=np.array([h["accuracy"] for h in hist]),
                 steps=np.array(trainer.global_step), buckets=np.array(len(trainer._train.reducer.buckets)))


def _rank_raise(outdir):
    import luminal.nn.functional as F
    from luminal.data import TensorDataset
    from luminal.distributed import DistributedDataLoader, world
    from luminal.training import Trainer

    r = world().Get_rank()
    calls = []

    def collate(samples):
        calls.append(1)
        if r == 1 and len(calls) == 3:
            raise RuntimeError("boom on rank 1 at batch 3")
        return tuple(np.stack(a) for a in zip(*samples))

    x, y = _data()
    model = _model(0)
    trainer = Trainer(model, _optimizer("sgd", model), F.cross_entropy, distributed=True)
    loader = DistributedDataLoader(TensorDataset(x, y), batch_size=BATCH, collate_fn=collate)
    trainer.fit(loader, epochs=1, progress=False)
    print("rank", r, "finished without error")  # must not happen on either rank


def _rank_uncaught(outdir):
    import luminal.nn.functional as F
    from luminal.distributed import world
    from luminal.training import Trainer

    model = _model(0)
    Trainer(model, _optimizer("sgd", model), F.cross_entropy, distributed=True)  # installs the excepthook
    if world().Get_rank() == 1:
        raise KeyError("uncaught on rank 1, outside the trainer")
    world().Barrier()  # rank 0 would wait here forever
    print("rank 0 finished without error")


def _rank_mismatch(outdir):
    import luminal.nn.functional as F
    from luminal.data import DataLoader, TensorDataset
    from luminal.distributed import world
    from luminal.training import Trainer

    r = world().Get_rank()
    x, y = _data()
    n = 64 if r == 0 else 72  # rank 1 would run one step more and wait forever in its last all-reduce
    model = _model(0)
    trainer = Trainer(model, _optimizer("sgd", model), F.cross_entropy, distributed=True)
    trainer.fit(DataLoader(TensorDataset(x[:n], y[:n]), batch_size=8), epochs=1, progress=False)
    print("rank", r, "finished without error")


# ---------------------------------------------------------------------------- the pytest side
def _mpiexec():
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else shutil.which("mpiexec")


def _launch(scenario, outdir, n=2):
    exe = _mpiexec()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    cmd = [exe, "-n", str(n), sys.executable, os.path.abspath(__file__), scenario, str(outdir)]
    # a session of its own, so a hang (the timeout) kills mpiexec *and* its ranks, leaving no orphans
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                          start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _require_mpi():
    """The test extra installs mpi4py and mpich, so a missing MPI is a failure (these tests cannot silently stop
    running); ``LUMINAL_SKIP_MPI=1`` skips them, with the reason, on a machine set up without the extra."""
    missing = None
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        missing = "mpi4py not installed (pip install -e '.[distributed]' or '.[test]')"
    if missing is None and _mpiexec() is None:
        missing = "no mpiexec next to the interpreter or on PATH (the mpich wheel provides it)"
    if missing:
        if os.environ.get("LUMINAL_SKIP_MPI") == "1":
            pytest.skip(missing)
        pytest.fail(missing)


@pytest.fixture(scope="module")
def train_run(tmp_path_factory):
    _require_mpi()
    out = tmp_path_factory.mktemp("dist_train")
    proc = _launch("train", out)
    assert proc.returncode == 0, f"mpiexec failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return out, proc


def _oracle(kind):
    """Single-process training on the concatenated global batches, from rank 0's initial weights."""
    import luminal.nn.functional as F
    from luminal.distributed import DistributedSampler
    from luminal.training import Trainer

    x, y = _data()
    model = _model(seed=0)
    trainer = Trainer(model, _optimizer(kind, model), F.cross_entropy)
    losses = []
    for epoch in range(EPOCHS):
        shards = [DistributedSampler(N_SAMPLES, num_replicas=2, rank=r, shuffle=True, seed=3).indices(epoch)
                  for r in range(2)]
        ep = []
        for k in range(0, len(shards[0]), BATCH):
            idx = np.concatenate([s[k:k + BATCH] for s in shards])
            ep.append(trainer.train_step((x[idx], y[idx])))
        losses.append(np.mean(ep))
    return _params(model), np.array(losses)


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_20_steps_match_single_process_on_the_global_batch(train_run, kind):
    out, _ = train_run
    ranks = [np.load(out / f"{kind}_rank{r}.npz") for r in range(2)]
    assert int(ranks[0]["steps"]) == int(ranks[1]["steps"]) == EPOCHS * N_SAMPLES // (2 * BATCH) == 20
    assert int(ranks[0]["buckets"]) == (4 if kind == "adam" else 1)
    expected, losses = _oracle(kind)
    for name, want in expected.items():
        got0, got1 = ranks[0][f"final/{name}"], ranks[1][f"final/{name}"]
        np.testing.assert_array_equal(got0, got1, err_msg=f"{kind}: ranks diverged on {name}")
        np.testing.assert_allclose(got0, want, rtol=1e-4, atol=2e-5, err_msg=f"{kind}: {name}")
        # the oracle's weights moved far more than the tolerance: the check is not vacuous
        assert np.abs(want - ranks[0][f"before/{name}"]).max() > 1e-2
    # each epoch's reported loss is the global batch's mean loss, as single-process training reports it
    np.testing.assert_allclose(ranks[0]["losses"], losses, rtol=1e-5)
    np.testing.assert_array_equal(ranks[0]["losses"], ranks[1]["losses"])


def test_broadcast_makes_differently_initialised_ranks_identical(train_run):
    out, _ = train_run
    r0, r1 = (np.load(out / f"sgd_rank{r}.npz") for r in range(2))
    names = [k[len("before/"):] for k in r0.files if k.startswith("before/")]
    assert any(not np.array_equal(r0[f"before/{k}"], r1[f"before/{k}"]) for k in names)  # really different
    for k in names:
        np.testing.assert_array_equal(r0[f"bcast/{k}"], r0[f"before/{k}"])  # rank 0 keeps its own
        np.testing.assert_array_equal(r1[f"bcast/{k}"], r0[f"before/{k}"])  # rank 1 gets rank 0's


def test_resume_is_read_by_rank_0_and_broadcast(train_run):
    out, _ = train_run
    for kind in ("sgd", "adam"):
        for r in range(2):
            z = np.load(out / f"{kind}_rank{r}.npz")
            assert int(z["resumed_epoch"]) == EPOCHS and int(z["resumed_steps"]) == 20
            for k in (f[len("final/"):] for f in z.files if f.startswith("final/")):
                np.testing.assert_array_equal(z[f"resumed/{k}"], z[f"final/{k}"])


def test_broadcast_covers_buffers(train_run):
    out, _ = train_run
    for r in range(2):
        z = np.load(out / f"bn_rank{r}.npz")
        np.testing.assert_array_equal(z["running_mean"], np.full(4, 10.0, np.float32))  # rank 0's
        assert z["num_batches_tracked"].shape == () and int(z["num_batches_tracked"]) == 5


def test_only_rank_0_writes_checkpoints_and_prints(train_run):
    out, proc = train_run
    assert (out / "sgd_rank0.ckpt.npz").exists() and (out / "adam_rank0.ckpt.npz").exists()
    assert not (out / "sgd_rank1.ckpt.npz").exists() and not (out / "adam_rank1.ckpt.npz").exists()
    # progress=True on both ranks, two runs: one summary line per epoch and run, from rank 0 only
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("epoch ")]
    assert len(lines) == 2 * EPOCHS, proc.stdout


def test_an_exception_on_one_rank_aborts_all(tmp_path):
    _require_mpi()
    try:
        proc = _launch("raise", tmp_path)
    except subprocess.TimeoutExpired as err:  # pragma: no cover - the failure this test exists for
        pytest.fail(f"rank 0 hung after rank 1 raised (no abort within {TIMEOUT_S} s): {err}")
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    assert "boom on rank 1 at batch 3" in text
    assert "finished without error" not in text


def test_an_uncaught_exception_outside_the_trainer_aborts_all(tmp_path):
    _require_mpi()
    try:
        proc = _launch("uncaught", tmp_path)
    except subprocess.TimeoutExpired as err:  # pragma: no cover
        pytest.fail(f"rank 0 hung in a barrier after rank 1 raised: {err}")
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    assert "uncaught on rank 1, outside the trainer" in text and "finished without error" not in text


def test_ranks_with_different_batch_counts_fail_clearly(tmp_path):
    _require_mpi()
    proc = _launch("mismatch", tmp_path)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    assert "different numbers of batches {0: 8, 1: 9}" in text
    assert "finished without error" not in text


# ---------------------------------------------------------------------------- no MPI needed
@pytest.mark.parametrize("n,world,shuffle,drop_last", [(10, 3, False, False), (10, 3, True, False),
                                                        (10, 3, True, True), (12, 4, True, False),
                                                        (2, 5, False, False), (7, 2, True, True)])
def test_sampler_shards_like_torch(n, world, shuffle, drop_last):
    from luminal.distributed import DistributedSampler

    for epoch in (0, 1):
        order = np.random.default_rng(np.random.SeedSequence(5, spawn_key=(epoch,))).permutation(n) if shuffle \
            else np.arange(n)
        per = -(-(n - world) // world) if drop_last and n % world else -(-n // world)
        total = per * world
        full = np.resize(order, total) if total > n else order[:total]  # torch: pad by repeating the head
        shards = []
        for r in range(world):
            s = DistributedSampler(n, num_replicas=world, rank=r, shuffle=shuffle, seed=5, drop_last=drop_last)
            s.set_epoch(epoch)
            got = np.array(list(s))
            assert len(got) == len(s) == per
            np.testing.assert_array_equal(got, full[r::world])
            shards.append(got)
        union = np.concatenate(shards)
        if drop_last:
            assert len(set(union.tolist())) == len(union) == (n // world) * world  # disjoint, tail dropped
        else:
            assert set(union.tolist()) == set(range(n))  # every sample, padding repeats a few
        if shuffle:  # a new order each epoch, the same on every rank for the same (seed, epoch)
            assert not np.array_equal(DistributedSampler(n, world, 0, seed=5).indices(0),
                                      DistributedSampler(n, world, 0, seed=5).indices(1)) or n <= world


def test_distributed_loader_batches_and_errors():
    from luminal.data import TensorDataset
    from luminal.distributed import DistributedDataLoader, DistributedSampler

    x = np.arange(20, dtype=np.float32)[:, None]
    ds = TensorDataset(x, np.arange(20))
    loaders = [DistributedDataLoader(ds, global_batch_size=6, num_replicas=2, rank=r, seed=1) for r in range(2)]
    assert [len(ld) for ld in loaders] == [4, 4]  # 10 samples per rank, batches of 3 (+ a last one of 1)
    seen = np.concatenate([b[1] for ld in loaders for b in ld])
    np.testing.assert_array_equal(np.sort(seen), np.arange(20))
    with pytest.raises(ValueError, match="global_batch_size 7 is not divisible by the 2 ranks"):
        DistributedDataLoader(ds, global_batch_size=7, num_replicas=2, rank=0)
    with pytest.raises(ValueError, match="exactly one of batch_size"):
        DistributedDataLoader(ds, num_replicas=2, rank=0)
    with pytest.raises(ValueError, match="rank 2 is out of range for 2 replicas"):
        DistributedSampler(ds, num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="cannot give each of 4 ranks one sample"):
        DistributedSampler(3, num_replicas=4, rank=0, drop_last=True)


def test_distributed_without_mpi4py_names_the_extra(monkeypatch):
    import luminal.nn.functional as F
    from luminal.training import Trainer

    monkeypatch.setitem(sys.modules, "mpi4py", None)  # "import mpi4py" now raises ImportError
    model = _model(0)
    with pytest.raises(ImportError, match=r"pip install 'luminal\[distributed\]'"):
        Trainer(model, _optimizer("sgd", model), F.cross_entropy, distributed=True)
    with pytest.raises(ValueError, match="bucket_cap_mb must be > 0, got 0"):
        Trainer(model, _optimizer("sgd", model), F.cross_entropy, distributed=True, bucket_cap_mb=0)


if __name__ == "__main__":
    scenario, outdir = sys.argv[1], sys.argv[2]
    {"train": _rank_train, "raise": _rank_raise, "mismatch": _rank_mismatch,
     "uncaught": _rank_uncaught}[scenario](outdir)
