"""A run's records and its folder: one JSON line a candidate, summary.json, the Pareto front.

Every candidate becomes one record: its id, proposer, the program proposed and the ``model``
calibrated (its ``params`` are that program's), status, train and held-out error, R^2, size,
skeleton and time; ``run.schema.json`` documents every field. Non-finite numbers are written as
null and read back as inf. A folder that holds a run is never overwritten unless asked.
"""
import json
import math
import signal
import threading
from contextlib import contextmanager
from pathlib import Path

__all__ = ["RECORD_FILE", "SUMMARY_FILE", "RunExistsError", "pareto_front", "run_schema"]

RECORD_FILE = "candidates.jsonl"
SUMMARY_FILE = "summary.json"


def run_schema():
    """The JSON Schema of a run folder (``run.schema.json``: summary.json and each line of
    candidates.jsonl), as a dict; every field a search writes is documented there."""
    from importlib import resources
    return json.loads(resources.files("ndvm.cosearch").joinpath("run.schema.json").read_text())


def pareto_front(records):
    """The records not dominated in (held-out error, size), by increasing size."""
    ok = sorted((r for r in records if r.get("status") == "ok"
                 and math.isfinite(r["heldout_error"])),
                key=lambda r: (r["size"], r["heldout_error"], r["id"]))
    front, best = [], math.inf
    for r in ok:
        if r["heldout_error"] < best:
            front.append(r)
            best = r["heldout_error"]
    return front


class RunExistsError(ValueError):
    """The ``out`` directory already holds a search and neither resume nor force was given."""


def _existing(out, resume, force):
    record_path = out / RECORD_FILE
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} exists and is not a directory; choose another out folder")
    held = [p for p in (record_path, out / SUMMARY_FILE) if p.exists()]
    if held and not resume and not force:
        n = 0
        if record_path.exists():
            with open(record_path, encoding="utf-8") as f:
                n = sum(1 for line in f if line.strip())
        raise RunExistsError(
            f"{out} already holds a search ({n} candidates in {RECORD_FILE}); continue it with "
            f"--resume (resume=True), replace it with --force (force=True), or choose a new "
            f"--out folder")
    return held


def _open_run(out, resume, force):
    """The record file of the run directory ``out``, after checking resume/force."""
    out = Path(out)
    record_path = out / RECORD_FILE
    held = _existing(out, resume, force)
    out.mkdir(parents=True, exist_ok=True)
    if not resume:
        for p in held:
            p.unlink()
    return record_path


@contextmanager
def uninterrupted():
    """Run the body whole: a Ctrl-C (SIGINT) that arrives inside it takes effect when it ends,
    through the handler that was there before. A search keeps a batch (its records in memory
    and their lines in the record file) inside one, so that the file never holds a record twice
    nor one the result lacks. Only the main thread receives Python's signals; elsewhere, and
    where SIGINT has no Python handler to defer, the body just runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.getsignal(signal.SIGINT)
    if not callable(before):  # (ignored, or the default action: nothing raises in the body)
        yield
        return
    came = []
    signal.signal(signal.SIGINT, lambda *a: came.append(a))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
        if came:
            signal.raise_signal(signal.SIGINT)  # (delivered now, to the handler restored)


def _read_records(path, repair=False):
    """The records of a record file, read a line at a time (a long run's file is never held
    whole in memory beside its records). ``repair``: a last line cut short (the process was
    killed while writing it) is cut off the file, so that the run continues after its last
    whole record; anywhere else a line that is not JSON raises ValueError."""
    records = []
    with open(path, "rb") as f:
        start, i, line = 0, 0, b""
        for i, line in enumerate(f, 1):
            if not line.endswith(b"\n"):
                break  # (the last line, its newline never written: whole or cut short)
            start += len(line)
            if line.strip():
                records.append(_parsed(line, path, i))
        else:
            return records
    if not line.strip():
        return records
    try:
        records.append(_parsed(line, path, i))
    except ValueError:
        if not repair:
            raise
        with open(path, "r+b") as f:
            f.truncate(start)
    else:
        if repair:  # (whole, but its newline was never written)
            with open(path, "ab") as f:
                f.write(b"\n")
    return records


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


def _dump(record):
    return json.dumps({k: ({n: _clean(x) for n, x in v.items()} if isinstance(v, dict)
                           else _clean(v)) for k, v in record.items()})


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


def _good(task, record):
    if record["status"] != "ok":
        return False
    if task.objective == "nll" or task.threshold is None:
        return math.isfinite(record["heldout_error"])
    return record["r2"] is not None and record["r2"] > task.threshold
