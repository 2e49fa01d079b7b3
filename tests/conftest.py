"""Shared fixtures: the client list, the reference data directory, and helpers."""
import contextlib
import json
import os
import threading
from http.server import HTTPServer
from pathlib import Path

import numpy as np
import pytest

import ndvm

# ../shared/data next to the checkout; NDVM_SHARED_DATA points elsewhere (e.g. from a worktree)
SHARED_DATA = Path(os.environ.get("NDVM_SHARED_DATA")
                   or Path(__file__).resolve().parents[1].parent / "shared" / "data")
PROGRAMS = Path(__file__).resolve().parent / "programs"
CLIENTS = ndvm.clients()
DATA_MISSING = ("optional reference data {path} is absent (the published artifact's oracle values "
                "and co-search candidates; every other test runs without it; set "
                "NDVM_SHARED_DATA=DIR to use a copy elsewhere)")


@contextlib.contextmanager
def local_http(handler):
    """A local HTTP server answering with ``handler`` (a BaseHTTPRequestHandler subclass) on a
    free port, in a thread; yields its base URL (ending in /v1, as an LLM endpoint's)."""
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def shared_json(name):
    """Load a file of ../shared/data, or skip the test when the directory is absent."""
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(DATA_MISSING.format(path=path))
    if name.endswith(".jsonl"):
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return json.loads(path.read_text())


def shared_json_or_empty(name, key):
    """For parametrization at collection time: the list under `key`, or [] when absent."""
    path = SHARED_DATA / name
    if not path.exists():
        return []
    return json.loads(path.read_text())[key]


@pytest.fixture(params=CLIENTS)
def client(request):
    return request.param


def rel_close(a, b, rtol, atol=0.0):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)


def pytest_report_header(config):
    if not SHARED_DATA.exists():
        return [DATA_MISSING.format(path=SHARED_DATA) + " (those tests skip)"]
    return []


def pytest_collection_modifyitems(config, items):
    """A data-driven test with no cases (the data is absent) says why, not 'empty parameter set'."""
    if SHARED_DATA.exists():
        return
    for item in items:
        for mark in item.iter_markers(name="skip"):
            if str(mark.kwargs.get("reason", "")).startswith("got empty parameter set"):
                item.add_marker(pytest.mark.skip(reason=DATA_MISSING.format(path=SHARED_DATA)),
                                append=False)
                break


def ndvm_taking_ctrl_c(*args):
    """The command that runs ``ndvm *args`` with Ctrl-C raising KeyboardInterrupt, as in a
    terminal: a child of a background job inherits SIGINT ignored, and Python then leaves it so
    (restored in the child itself: a preexec_fn is unsafe in a process with threads)."""
    import sys
    code = ("import runpy, signal, sys\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "sys.argv[0] = 'ndvm'\n"
            "runpy.run_module('ndvm', run_name='__main__')\n")
    return [sys.executable, "-c", code, *args]


def run_with_stack(work, size):
    """Run ``work()`` on a new thread whose stack is ``size`` bytes, until it ends (what a
    program or a tree does when the native stack is small)."""
    import threading
    old = threading.stack_size(size)
    try:
        t = threading.Thread(target=work)
        t.start()
        t.join()
    finally:
        threading.stack_size(old)


def as_recorded(front):
    """A search's front as its records are (each front member also carries its parameters'
    standard errors, ``stderr``)."""
    return [{k: v for k, v in r.items() if k != "stderr"} for r in front]
