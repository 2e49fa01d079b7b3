"""A run's records and its folder: one JSON line a candidate, summary.json, the Pareto front.

Every candidate becomes one record: its id, proposer, the program proposed and the ``model``
calibrated (its ``params`` are that program's), status, train and held-out error, R^2, size,
skeleton and time; ``run.schema.json`` documents every field. Non-finite numbers are written as
null and read back as inf. A folder that holds a run is never overwritten unless asked.

A search keeps its records as ``Records``: blocks of records pickled and compressed (~0.1 KB a
record instead of ~1.2-1.6 KB as dicts), read back a block at a time. An island's epoch packs its
own records (``RecordBlock``: compressed, and as the JSON lines of the run folder) in the process
that ran it, so the coordinating process neither unpacks nor serializes them. Each block also
keeps its ok records' distinct structures as 8-byte digests (~7 bytes a record on damped, where
~90% of them are distinct), so a search counts the structures it scored without unpacking a
block (``Records.structures``).
"""
import bisect
import json
import math
import operator
import os
import pickle
import signal
import tempfile
import threading
import warnings
import zlib
from array import array
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ndvm._core._core import Seen, front_fold, stamped_lines

__all__ = ["RECORD_FILE", "SUMMARY_FILE", "ById", "Front", "RecordBlock", "Records",
           "RunExistsError", "pareto_front", "run_schema"]

RECORD_FILE = "candidates.jsonl"
SUMMARY_FILE = "summary.json"
# A Records given a folder to spill to keeps about this many bytes of packed records in memory
# (~2 million records) and the older ones in a temporary file there (_Spilled).
SPILL_BYTES = 256 * 2**20


def run_schema():
    """The JSON Schema of a run folder (``run.schema.json``: summary.json and each line of
    candidates.jsonl), as a dict; every field a search writes is documented there."""
    from importlib import resources
    return json.loads(resources.files("ndvm.cosearch").joinpath("run.schema.json").read_text())


def pareto_front(records):
    """The records not dominated in (held-out error, size), by increasing size (ties: the lower
    id): each folded into the front so far (``Front``), so a long search's records are never all
    held at once."""
    front = Front()
    front.add(records)
    return front.records


class Front:
    """A Pareto front (``pareto_front``'s, in its order: by size, then held-out error, then id)
    with each member's size and held-out error in lists of their own, that ``add`` updates in
    place: new records folded in one at a time (each kept when every member before it has a
    higher error, and the members after it that it then dominates dropped: the front of the
    union), without reading its other members again. (A record's place is found among the sizes,
    ints, and only members of its own size compare errors and ids: no tuple made and compared a
    record.)"""

    __slots__ = ("errors", "records", "sizes")

    def __init__(self, front=()):
        self.records = list(front)
        self.sizes = [r["size"] for r in self.records]
        self.errors = [r["heldout_error"] for r in self.records]

    def add(self, records):
        """Fold ``records`` in (those not ok or without a finite held-out error are not on a
        front); ``self.records`` is then ``pareto_front(records before + these)``. (One native
        loop, ``ndvm._core.front_fold``: a search folds every round's records, and every block
        of an island's, one at a time.)"""
        front_fold(self.records, self.sizes, self.errors, records)


class RunExistsError(ValueError):
    """The ``out`` directory already holds a search and neither resume nor force was given."""


def _existing(out, resume, force):
    record_path = out / RECORD_FILE
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} exists and is not a directory; choose another out folder")
    held = [p for p in (record_path, out / SUMMARY_FILE) if p.exists()]
    if held and not resume and not force:
        what = f"its {SUMMARY_FILE}, no {RECORD_FILE}"  # (a run whose records were removed)
        if record_path.exists():
            with open(record_path, encoding="utf-8") as f:
                what = f"{sum(1 for line in f if line.strip())} candidates in {RECORD_FILE}"
        raise RunExistsError(
            f"{out} already holds a search ({what}); continue it with --resume (resume=True), "
            f"replace it with --force (force=True), or choose a new --out folder")
    return held


def _open_run(out, resume, force):
    """The record file of the run folder ``out``, opened to append and locked for this search
    (closing it unlocks it; a search killed outright leaves no lock), after checking
    resume/force: a new run empties it and removes the summary. RunExistsError when another
    search holds the folder (two writing one record file would record candidates twice), and
    when resuming a folder whose summary is left without its records (nothing to continue; a
    new run would replace the summary). Returns (the file, opened for bytes: lines are written
    as the UTF-8 bytes they are made as; whether it existed before)."""
    out = Path(out)
    record_path = out / RECORD_FILE
    held = _existing(out, resume, force)
    existed = record_path.exists()
    if resume and not existed and (out / SUMMARY_FILE).exists():
        raise RunExistsError(
            f"cannot resume: {out} holds a {SUMMARY_FILE} but no {RECORD_FILE} (its records "
            f"removed?): there is nothing to continue; replace it with --force (force=True), "
            f"or choose a new --out folder")
    out.mkdir(parents=True, exist_ok=True)
    sink = open(record_path, "ab")  # noqa: SIM115 - the caller closes it
    try:
        if not _lock(sink):
            raise RunExistsError(
                f"{out} is in use: another search is writing its {RECORD_FILE} (a run folder "
                f"takes one search at a time); wait for it to end, or choose another --out "
                f"folder")
        if not resume:
            sink.truncate(0)
            for p in held:
                if p != record_path:
                    p.unlink()
    except BaseException:
        sink.close()
        raise
    return sink, existed


def _lock(f):
    """Take an exclusive lock on the open file ``f`` without waiting: False when another
    process holds it (True where the system or the file system has no such locks: Windows
    here, an NFS mount without its lock service)."""
    try:
        import fcntl
    except ImportError:
        return True
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:  # (ENOLCK, EOPNOTSUPP: the folder is used unlocked, as before)
        return True
    return True


_DEFERRED = (signal.SIGINT, signal.SIGTERM)  # (the signals uninterrupted() holds back)


class _Held:
    """SIGINT and SIGTERM held back, uninterrupted()'s rule: their handlers (``before``, those
    that were there) replaced by ``handle``, which notes a signal that arrives while ``depth``
    > 0 (inside an uninterrupted() body) and passes any other straight to the handler before;
    ``deliver`` sends the noted ones on, each once."""

    def __init__(self, before):
        self.before, self.depth, self.came = before, 0, []

    def handle(self, signum, frame):
        if self.depth:
            self.came.append(signum)
        else:
            self.before[signum](signum, frame)

    def install(self):
        for s in self.before:
            signal.signal(s, self.handle)

    def restore(self):
        for s, h in self.before.items():
            signal.signal(s, h)

    def deliver(self):
        came, self.came = dict.fromkeys(self.came), []
        for s in came:
            signal.raise_signal(s)  # (to the handler before, now or through ``handle``)


_HELD = None  # holding()'s _Held while its block runs (main thread)


def _handlers_to_defer():
    """{signal: its handler} of the deferred signals with a Python handler, or None (off the
    main thread, which alone receives Python's signals, or where neither has one: ignored, or
    the default action, nothing raises in the body)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    before = {s: signal.getsignal(s) for s in _DEFERRED}
    return {s: h for s, h in before.items() if callable(h)} or None


@contextmanager
def holding():
    """uninterrupted()'s handlers installed once for the block (a search keeps a batch in one
    every round: four ``signal.signal`` calls each, ~12-20 us, where inside this block one
    costs a counter). A signal that arrives in the block outside an uninterrupted() body goes
    straight to the handler that was there before; the handlers are restored when it ends."""
    global _HELD
    before = None if _HELD is not None else _handlers_to_defer()
    if before is None:
        yield
        return
    held = _HELD = _Held(before)
    held.install()
    try:
        yield
    finally:
        _HELD = None
        held.restore()


@contextmanager
def uninterrupted():
    """Run the body whole: a Ctrl-C (SIGINT), or a SIGTERM with a Python handler (the command
    line's: ``cli.py``), that arrives inside it takes effect when it ends, through the handler
    that was there before. A search keeps a batch (its records in memory and their lines in the
    record file) inside one, so that the file never holds a record twice nor one the result
    lacks. Only the main thread receives Python's signals; elsewhere, and where neither signal
    has a Python handler to defer, the body just runs. Inside ``holding()`` the handlers it
    installed do the deferring."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held, own = _HELD, False
    if held is None:
        before = _handlers_to_defer()
        if before is None:
            yield
            return
        held, own = _Held(before), True
        held.install()
    held.depth += 1
    try:
        yield
    finally:
        held.depth -= 1
        if own:
            held.restore()
        if not held.depth:
            held.deliver()


def _iter_records(path, repair=False):
    """The records of a record file, read a line at a time (a long run's file is never held
    whole in memory). ``repair``: a last line cut short (the process was killed while writing
    it) is cut off the file, so that the run continues after its last whole record; anywhere
    else a line that is not JSON raises ValueError."""
    with open(path, "rb") as f:
        start, i, line = 0, 0, b""
        for i, line in enumerate(f, 1):
            if not line.endswith(b"\n"):
                break  # (the last line, its newline never written: whole or cut short)
            start += len(line)
            if line.strip():
                yield _parsed(line, path, i)
        else:
            return
    if not line.strip():
        return
    try:
        last = _parsed(line, path, i)
    except ValueError:
        if not repair:
            raise
        with open(path, "r+b") as f:
            f.truncate(start)
        return
    if repair:  # (whole, but its newline was never written)
        with open(path, "ab") as f:
            f.write(b"\n")
    yield last


def _parsed(line, path, i):
    """Line ``i`` of the record file ``path`` as JSON (a record), or ValueError saying where."""
    try:
        return json.loads(line)
    except ValueError as e:
        raise ValueError(f"{path}:{i}: not a JSON record ({e})") from None


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


_STRICT = json.JSONEncoder(allow_nan=False, check_circular=False)  # (a record has no cycle)


def _dump(record):
    """A record's line in the record file: its JSON, non-finite numbers as null."""
    try:
        return _STRICT.encode(record)  # (most records: every number finite, nothing to clean)
    except ValueError:
        return json.dumps({k: ({n: _clean(x) for n, x in v.items()} if isinstance(v, dict)
                               else _clean(v)) for k, v in record.items()})


def _lines(records):
    """The record file's lines for ``records`` (one JSON object each, newline-ended), as the
    file's UTF-8 bytes."""
    return "".join(_dump(r) + "\n" for r in records).encode()


def _load(record):
    """A record as read from a record file (non-finite errors were written as null; a record
    of an older ndvm, with ``src`` and an optional ``model``, gets today's fields)."""
    for k in ("train_error", "heldout_error"):
        if k in record and record[k] is None:
            record[k] = math.inf
    if "proposed" not in record and "src" in record:
        src = record.pop("src")
        record["proposed"] = src
        if not record.get("model"):
            record["model"] = src if record.get("status") in ("ok", "failed") else None
    return record


def _jsonable(obj):
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_jsonable(v) for v in obj]
    return _clean(obj)


def _structures(records):
    """The distinct structures of the ok ``records`` (each one's ``skeleton``, or its ``model``
    without one: what a search counts as the programs it scored; a record with neither, not a
    search's, has none), packed as a Seen packs them: 8-byte digests, the same in every process,
    in the order first met."""
    seen = Seen()
    seen.mark()
    for r in records:
        if r["status"] == "ok":
            structure = r.get("skeleton") or r.get("model")
            if isinstance(structure, str):
                seen.add(structure)
    return seen.added()


def _good(task, record):
    if record["status"] != "ok":
        return False
    if task.objective == "nll" or task.threshold is None:
        return math.isfinite(record["heldout_error"])
    return record["r2"] is not None and record["r2"] > task.threshold


class RecordBlock:
    """Records packed together where they were made: pickled and compressed (``data``), as the
    lines of the record file (``lines``, bytes, made only when asked), their ids and the count of
    each status; given the ``task``, also the Pareto front among them and the first good one
    (``good``: lowest id), so that whoever receives the block can follow a search without
    unpacking it; ``structures``, the distinct structures of its ok records as 8-byte digests
    (a Seen's, the same in every process: ``Records.structures`` counts a search's without
    unpacking its blocks). ``stamp(**fields)`` gives every record of the block more fields (an
    island search's coordinator stamps ``time`` and ``island`` when the block arrives); they are
    added to each record read back, to each line written, and to the front and good records at
    once."""

    __slots__ = ("counts", "data", "extra", "front", "good", "ids", "lines", "structures")

    def __init__(self, records, task=None, lines=False):
        self.data = zlib.compress(pickle.dumps(records, pickle.HIGHEST_PROTOCOL), 1)
        self.lines = _lines(records) if lines else None
        self.ids = array("q", (r["id"] for r in records))
        self.counts = dict(Counter(r["status"] for r in records))
        self.structures = _structures(records)
        self.front = [] if task is None else pareto_front(records)
        self.good = None if task is None else next((r for r in records if _good(task, r)), None)
        self.extra = {}

    def __len__(self):
        return len(self.ids)

    def stamp(self, **fields):
        self.extra.update(fields)
        for r in (*self.front, *([self.good] if self.good is not None else [])):
            r.update(fields)

    def packed(self):
        """This block without its lines, front and good record (what Records keeps)."""
        out = object.__new__(RecordBlock)
        out.data, out.ids, out.counts, out.extra = self.data, self.ids, self.counts, self.extra
        out.structures = self.structures
        out.lines, out.front, out.good = None, [], None
        return out

    def records(self):
        """The block's records, as new dicts (with the stamped fields)."""
        data = self.data
        out = pickle.loads(zlib.decompress(data if type(data) is bytes else bytes(data)))
        if self.extra:
            for r in out:
                r.update(self.extra)
        return out

    def encoded(self):
        """The block's lines for the record file (with the stamped fields), as the file's UTF-8
        bytes (those made where the epoch ran, neither decoded nor encoded again here)."""
        if self.lines is None:
            return _lines(self.records())
        if not self.extra:
            return self.lines
        # (each line is one JSON object; the stamped fields close it: one native pass over the
        # bytes)
        more = json.dumps(_jsonable(self.extra))[1:-1].encode()
        return stamped_lines(self.lines, b", " + more + b"}\n")

    def text(self):
        """The block's lines for the record file (with the stamped fields), as str."""
        return self.encoded().decode()


class _Spilled:
    """A block's packed records in a Records' spill file: read back as ``bytes()`` of it (one
    ``os.pread``: any thread), and pickled as those bytes."""

    __slots__ = ("file", "offset", "size")

    def __init__(self, file, offset, size):
        self.file, self.offset, self.size = file, offset, size

    def __len__(self):
        return self.size

    def __bytes__(self):
        data = os.pread(self.file.fileno(), self.size, self.offset)
        if len(data) != self.size:
            raise OSError(f"the records' spill file {self.file.name!r} ended at "
                          f"{self.offset + len(data)} bytes, before {self.offset + self.size}")
        return data

    def __reduce__(self):
        return bytes, (bytes(self),)


class Records(Sequence):
    """A search's records, in memory but compact: a read-only sequence of dicts (index, slice,
    iterate, ``len``), kept as ``RecordBlock`` s of at most ``block`` records with the newest
    records as dicts until a block fills. Each record read is a dict made from its block (the
    last blocks read by index are kept: a record indexed twice soon is the same dict; a pass
    over them keeps nothing), so change a copy, not the record. ``counts()``: the records of
    each status; ``ids()``: every id, in order; ``structures()``: how many distinct structures
    the ok ones have.
    With ``spill`` (a folder), once its packed records in memory pass SPILL_BYTES they go to a
    temporary file there (gone when the Records is, or the process ends), read back as they
    are read: a search of billions of candidates keeps ~10-20 bytes a record in memory (its ids,
    counts and the digests of its blocks' structures: ``structures()``). Pickled, a Records is
    whole (its spilled blocks read back into the pickle)."""

    _CACHED = 64  # blocks kept unpacked: an island search reads its islands' blocks in turn

    def __init__(self, records=(), block=256, spill=None):
        self._block = block
        self._blocks, self._starts, self._tail = [], [], []
        self._n = 0
        self._order = None  # positions in id order (sort_by_id), or None: the order added
        self._cache = OrderedDict()
        self._spill, self._file = spill, None  # (the spill folder and file, when there are)
        self._held = 0  # bytes of packed records in memory
        self._in_file = 0  # the first blocks, whose packed records are in the file
        self.extend(records)

    def __len__(self):
        return self._n

    def extend(self, records):
        """Add records (dicts) at the end."""
        before = self._n
        for r in records:
            self._tail.append(r)
            self._n += 1
            if len(self._tail) == self._block:
                self._seal()
        self._appended(before)

    def add(self, block):
        """Add a RecordBlock's records at the end (what is kept of it: its packed records, ids
        and stamped fields; its lines, front and good record are the caller's)."""
        self._seal()
        before = self._n
        self._starts.append(self._n)
        self._blocks.append(block.packed())
        self._n += len(block)
        self._appended(before)
        self._kept(block)

    def _appended(self, before):
        if self._order is not None:  # (sorted before: what is added after comes after)
            self._order = np.concatenate([self._order, np.arange(before, self._n)])

    def _seal(self):
        if self._tail:
            tail, self._tail = self._tail, []
            self._starts.append(self._n - len(tail))
            self._blocks.append(RecordBlock(tail))
            self._kept(self._blocks[-1])

    def _kept(self, block):
        """Count a block's packed bytes; spill every block in memory once they pass
        SPILL_BYTES (when given a folder). A folder that cannot take them is warned of once,
        and the records stay in memory."""
        self._held += len(block.data)
        if self._spill is None or self._held <= SPILL_BYTES:
            return
        try:
            if self._file is None:
                self._file = tempfile.TemporaryFile(  # noqa: SIM115 - open while it lives
                    dir=self._spill, prefix="ndvm-records-")
            f, moved = self._file, []
            f.seek(0, os.SEEK_END)
            for b in self._blocks[self._in_file:]:
                moved.append((b, f.tell(), len(b.data)))
                f.write(b.data)
            f.flush()
        except OSError as e:
            warnings.warn(f"ndvm: cannot keep the search's records in a file in {self._spill} "
                          f"({e}); they stay in memory", RuntimeWarning, stacklevel=3)
            self._spill = None
            return
        for b, offset, size in moved:  # (only once every byte is in the file)
            b.data = _Spilled(f, offset, size)
        self._held, self._in_file = 0, len(self._blocks)

    def counts(self):
        """{status: number of records} (its blocks' counts, and the newest records')."""
        out = Counter(r["status"] for r in self._tail)
        for b in self._blocks:
            out.update(b.counts)
        return dict(out)

    def structures(self):
        """How many distinct structures its ok records have (``_structures``): the union of
        its blocks' digests (``RecordBlock.structures``) and the newest records', no block
        unpacked (but one pickled by an ndvm that did not keep them)."""
        packed = [getattr(b, "structures", None) for b in self._blocks]
        packed = [p if p is not None else _structures(b.records())
                  for p, b in zip(packed, self._blocks)]
        return len(Seen.of(b"".join(packed) + _structures(self._tail)))

    def ids(self):
        """Every record's id, in order, as an int64 numpy array."""
        raw = self._ids_added()
        return raw if self._order is None else raw[self._order]

    def _ids_added(self):
        return np.concatenate([np.frombuffer(b.ids, dtype=np.int64) for b in self._blocks]
                              + [np.array([r["id"] for r in self._tail], dtype=np.int64)])

    def sort_by_id(self):
        """Order the records by id (an island search's arrive island after island)."""
        self._seal()
        order = np.argsort(self._ids_added(), kind="stable")
        self._order = None if np.array_equal(order, np.arange(self._n)) else order

    def _passing(self, k):
        """Block ``k``'s records for a pass: the cached ones, else unpacked and not kept."""
        got = self._cache.get(k)
        return self._blocks[k].records() if got is None else got

    def _unpacked(self, k):
        got = self._cache.get(k)
        if got is None:
            got = self._cache[k] = self._blocks[k].records()
            if len(self._cache) > self._CACHED:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(k)
        return got

    def _at(self, pos):
        """The record at position ``pos`` in the order added."""
        sealed = self._n - len(self._tail)
        if pos >= sealed:
            return self._tail[pos - sealed]
        k = bisect.bisect_right(self._starts, pos) - 1
        return self._unpacked(k)[pos - self._starts[k]]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        i = operator.index(i)  # (numpy integers too; TypeError for what a list refuses)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"record {i} of {self._n}")
        return self._at(i if self._order is None else int(self._order[i]))

    def __iter__(self):
        if self._order is None:  # (a block unpacked for the pass only: nothing kept after it)
            for k in range(len(self._blocks)):
                yield from self._passing(k)
            yield from list(self._tail)
            return
        self._seal()  # (every position in a block)
        starts = np.asarray(self._starts)
        for w in range(0, self._n, 16384):  # (a window's blocks unpacked once each, in turn)
            pos = self._order[w:w + 16384]
            which = np.searchsorted(starts, pos, side="right") - 1
            got = {k: self._passing(k) for k in np.unique(which).tolist()}
            for p, k in zip(pos.tolist(), which.tolist()):
                yield got[k][p - self._starts[k]]

    def __eq__(self, other):
        if not isinstance(other, (Records, list, tuple)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None

    def __repr__(self):
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.counts().items()))
        return f"<Records: {self._n} ({counts})>"

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_cache"] = OrderedDict()
        state["_spill"] = state["_file"] = None  # (spilled blocks pickle as their bytes)
        state["_held"], state["_in_file"] = sum(len(b.data) for b in self._blocks), 0
        return state


class ById(Mapping):
    """Records looked up by id (an earlier session's, which a resumed run replays): a read-only
    mapping id -> record over a ``Records``, by a sorted array of their ids (8 bytes a record
    beside the packed records, where a dict of the records held each as a dict)."""

    def __init__(self, records):
        self.records = records
        ids = records.ids()
        self._where = np.argsort(ids, kind="stable")
        self._ids = ids[self._where]

    def _find(self, i):
        if not self._ids.size or not isinstance(i, (int, np.integer)):
            return None
        k = int(np.searchsorted(self._ids, i))
        return k if k < self._ids.size and self._ids[k] == i else None

    def __getitem__(self, i):
        k = self._find(i)
        if k is None:
            raise KeyError(i)
        return self.records[int(self._where[k])]

    def __contains__(self, i):
        return self._find(i) is not None

    def __len__(self):
        return int(self._ids.size)

    def __iter__(self):
        return iter(self._ids.tolist())


def _spill_folder(out):
    """Where a search's records past SPILL_BYTES go (records.Records): its run folder, else the
    system's folder for temporary files."""
    return str(out) if out is not None else tempfile.gettempdir()
