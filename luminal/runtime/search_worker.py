"""The GEMM search run in a child process (``search="background"``).

A background search measures while the user's program runs: in a thread of the user's process, a candidate
that crashed (a segfault in generated code, an out-of-memory kill) would take the program down with it, a hung
one could not be stopped, and the search's Python work (random operands, numpy's float64 checks) would take
the interpreter lock from the user's loop. :func:`search_in_process` instead runs
:func:`luminal.runtime.search.search_gemms` in a fresh ``python -m luminal.runtime.search_worker``: the shapes,
level, budget and tuning file go to it pickled in a file, the :class:`~luminal.runtime.search.SearchResult`
comes back the same way (with the warnings the search raised, re-raised here), and the winners land in the
shared tuning cache, which is written under a file lock by every process. The child:

* starts in its own session, so a Ctrl-C meant for the user's program does not stop it half-way;
* exits as soon as its parent is gone: it watches the pipe on its standard input, whose write end only the
  parent holds (a killed parent leaves no search running on the machine);
* is killed after ``timeout`` seconds (default :func:`default_timeout`: the budget's hard limit, twice the
  budget, plus time to compile the candidates);
* leaves nothing behind: its operands, candidate libraries' scratch and heap go with the process.

A child that died, was killed or produced no result raises :class:`SearchProcessError` naming what happened
(the signal, the exit status, the last lines it wrote to stderr); the runtime reports it through
``wait_for_search()`` and goes on running the plan it had.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import warnings

# the command that starts a worker (tests replace it to simulate a crash or a hang)
WORKER = [sys.executable, "-m", "luminal.runtime.search_worker"]
COMPILE_ALLOWANCE_S = 300.0  # on top of twice the budget: building the candidates' library cold
STDERR_TAIL = 2000           # characters of the child's stderr quoted in an error


class SearchProcessError(RuntimeError):
    """The search process died, timed out or returned no result."""


def default_timeout(budget_s: float | None, level: str) -> float:
    """Seconds a worker may take: twice the measuring budget (where the search itself stops measuring) plus
    :data:`COMPILE_ALLOWANCE_S` to build the candidates' library."""
    from .search import DEFAULT_BUDGET
    budget = budget_s if budget_s is not None else DEFAULT_BUDGET["full" if level == "full" else "quick"]
    return 2.0 * budget + COMPILE_ALLOWANCE_S


def _child_env() -> dict:
    """The parent's environment, with this luminal first on the module path (a program that imported luminal
    from a source folder runs its worker from the same one)."""
    import luminal
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(luminal.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def _describe(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def search_in_process(shapes, level: str, budget_s: float | None, blas: bool, timeout: float | None = None):
    """:func:`luminal.runtime.search.search_gemms` (progress bar off, winners stored in the tuning cache) run
    in a child process; returns its :class:`~luminal.runtime.search.SearchResult`. Raises
    :class:`SearchProcessError` when the child crashes, exceeds ``timeout`` seconds or returns nothing."""
    from . import tuning
    timeout = default_timeout(budget_s, level) if timeout is None else timeout
    with tempfile.TemporaryDirectory(prefix="luminal-search-") as tmp:
        request, answer, log = (os.path.join(tmp, n) for n in ("request.pkl", "result.pkl", "stderr.txt"))
        with open(request, "wb") as f:
            pickle.dump({"shapes": list(shapes), "level": level, "budget_s": budget_s, "blas": blas,
                         "tuning_path": tuning.tuning_path()}, f)
        with open(log, "wb") as err:
            proc = subprocess.Popen(WORKER + [request, answer], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=err, env=_child_env(), start_new_session=True)
        try:
            code = proc.wait(timeout)
        except BaseException as e:  # (past the timeout, or the waiting thread interrupted: the child must go)
            proc.kill()
            proc.wait()
            if isinstance(e, subprocess.TimeoutExpired):
                raise SearchProcessError(f"the search process did not finish within {timeout:.0f} s and was "
                                         "killed" + _tail(log)) from None
            raise
        finally:
            if proc.stdin is not None:
                proc.stdin.close()
        if code != 0:
            raise SearchProcessError(f"the search process {_describe(code)}" + _tail(log))
        try:
            with open(answer, "rb") as f:
                out = pickle.load(f)
        except (OSError, EOFError, pickle.UnpicklingError) as e:
            raise SearchProcessError(f"the search process returned no result ({e})" + _tail(log)) from None
    for message in out["warnings"]:
        warnings.warn(message, stacklevel=2)
    return out["result"]


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""
    return f"; its stderr ended with:\n{text[-STDERR_TAIL:]}" if text else ""


def _exit_when_orphaned() -> None:
    """Exit the moment standard input reaches its end: the parent closed the pipe or died."""
    try:
        while os.read(0, 65536):  # (the raw descriptor: sys.stdin's buffer lock would stall the exit)
            pass
    except OSError:
        pass
    os._exit(3)


def main(argv=None) -> int:
    """The worker: ``python -m luminal.runtime.search_worker REQUEST RESULT``."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m luminal.runtime.search_worker REQUEST RESULT", file=sys.stderr)
        return 2
    request, answer = argv
    threading.Thread(target=_exit_when_orphaned, name="luminal-orphan-watch", daemon=True).start()
    with open(request, "rb") as f:
        req = pickle.load(f)
    from . import tuning
    from .search import search_gemms
    tuning.tuning_path = lambda: req["tuning_path"]  # (the parent's, which a test may have redirected)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = search_gemms(req["shapes"], req["level"], req["budget_s"], req["blas"], progress=False)
    tmp = answer + ".part"
    with open(tmp, "wb") as f:
        pickle.dump({"result": result, "warnings": [str(w.message) for w in caught]}, f)
    os.replace(tmp, answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
