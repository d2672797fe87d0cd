"""On-disk memo of equality-saturation results, so a graph the e-graph has seen before compiles without egglog.

Saturation and extraction are deterministic functions of their input: the egglog program (schema, rule files,
the encoded graph's rows and facts), the view table the size-aware cost reads, the root nodes, the bounds on
iterations and e-nodes, the cost backend, and the versions of egglog and of luminal's e-graph code. The SHA-256 of
all of that keys an entry holding what the rebuild needs: the e-graph read back (:class:`EGraphData`), the chosen
extraction (:class:`Extraction`) and the report (iterations, rules fired, costs, each change's rules). A second
compile of the same model (another process, another day) then skips loading, saturating, reading back and
extracting: for the 6-layer symbolic BERT encoder that is about 0.15 s of a 0.3 s cached compile.

Not memoized: a run stopped by its time bound (``max_seconds``: where it stops depends on the machine's speed, so
the result is not a function of the input) and a run with a custom ``op_cost`` function (which no key can name).

Entries live in ``<cache_dir>/egraph/<key>.pkl`` (see :func:`luminal._fs.cache_dir`), written to a temporary name
and renamed; each starts with the SHA-256 of its payload, and an entry that does not verify (truncated, edited,
from an incompatible luminal) is ignored and rewritten, never trusted. ``LUMINAL_EGRAPH_MEMO=0`` turns the memo
off.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import threading
import warnings

from ..._fs import cache_dir, fsync_dir, remove_stale
from .extract import EGraphData, Extraction

FORMAT = 1  # bump when the payload's layout changes
_HERE = os.path.dirname(os.path.abspath(__file__))
_identity: str | None = None
_TEMP = re.compile(r"^[0-9a-f]{40}\.pkl\.tmp(\d+)\.\d+$")  # pid, thread


class MemoStats:
    """Counters for tests and benchmarks: memo hits, misses (a fresh saturation) and entries rejected."""

    hits = 0
    misses = 0
    rejected = 0


def enabled() -> bool:
    """Whether the memo is on (``LUMINAL_EGRAPH_MEMO`` unset or not ``0``)."""
    return os.environ.get("LUMINAL_EGRAPH_MEMO", "1") not in ("0", "")


def _code_identity() -> str:
    """Fingerprint of what computes a result besides its input: luminal's e-graph modules and egglog's extension
    (file names and sizes: a new version of either misses every old entry)."""
    global _identity
    if _identity is None:
        h = hashlib.sha256(f"format {FORMAT}".encode())
        for name in sorted(os.listdir(_HERE)):
            if name.endswith(".py"):
                with open(os.path.join(_HERE, name), "rb") as f:
                    h.update(name.encode() + b"\0" + f.read())
        try:
            import importlib.util

            spec = importlib.util.find_spec("egglog")
            folder = os.path.dirname(spec.origin)
            for name in sorted(os.listdir(folder)):
                if name.startswith("bindings."):
                    h.update(f"{name} {os.path.getsize(os.path.join(folder, name))}".encode())
        except Exception:  # no egglog to fingerprint: saturation itself will say so
            h.update(b"egglog ?")
        _identity = h.hexdigest()
    return _identity


def _canon(x) -> str:
    """A deterministic text for a view-table entry (expressions spelled with their symbols' bounds)."""
    from ...shape import Expression

    if isinstance(x, Expression):
        return f"({x.op} {' '.join(_canon(a) for a in x.args)})"
    if isinstance(x, (list, tuple)):
        return "[" + " ".join(_canon(a) for a in x) + "]"
    return repr(x)


def key(program: str, rows: dict, views: list, root_nodes, settings: tuple) -> str:
    """The memo key (hex SHA-256) of one saturation's whole input."""
    h = hashlib.sha256(_code_identity().encode())
    h.update(program.encode())
    for rel in sorted(rows):
        h.update(f"\0{rel}\0".encode() + "\n".join(rows[rel]).encode())
    for v in views:
        h.update(_canon((v.dims, v.strides, v.offset, v.masks)).encode() + b"\n")
    h.update(repr(sorted(root_nodes)).encode())
    h.update(repr(settings).encode())
    return h.hexdigest()[:40]


def _path(k: str) -> str:
    return os.path.join(cache_dir(), "egraph", k + ".pkl")


def load(k: str):
    """The entry stored under ``k`` as ``(EGraphData, Extraction, report dict)``, or None (absent or invalid)."""
    path = _path(k)
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError:
        return None
    digest, payload = blob[:64], blob[64:]
    try:
        ok = digest.decode() == hashlib.sha256(payload).hexdigest()
        entry = pickle.loads(payload) if ok else None
    except Exception:
        entry = None
    if not (isinstance(entry, tuple) and len(entry) == 4 and entry[0] == k and isinstance(entry[1], EGraphData)
            and isinstance(entry[2], Extraction) and isinstance(entry[3], dict)):
        MemoStats.rejected += 1
        warnings.warn(f"e-graph memo entry {path} does not verify (truncated, edited or from another luminal); "
                      "saturating again and rewriting it", stacklevel=4)
        return None
    return entry[1], entry[2], entry[3]


def store(k: str, eg: EGraphData, ext: Extraction, report: dict) -> None:
    """Write the entry for ``k`` atomically (temporary file, fsync, rename); a failure to write only warns."""
    path = _path(k)
    folder = os.path.dirname(path)
    tmp = f"{path}.tmp{os.getpid()}.{threading.get_ident()}"
    try:
        os.makedirs(folder, exist_ok=True)
        remove_stale(folder, _TEMP)
        payload = pickle.dumps((k, eg, ext, report), protocol=pickle.HIGHEST_PROTOCOL)
        with open(tmp, "wb") as f:
            f.write(hashlib.sha256(payload).hexdigest().encode() + payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(folder)
    except OSError as err:
        warnings.warn(f"could not write the e-graph memo entry {path}: {err}", stacklevel=4)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
