"""Shared fixtures: the client list, the reference data directory, and helpers."""
import json
import os
from pathlib import Path

import numpy as np
import pytest

import ndvm

# ../shared/data next to the checkout; NDVM_SHARED_DATA points elsewhere (e.g. from a worktree)
SHARED_DATA = Path(os.environ.get("NDVM_SHARED_DATA")
                   or Path(__file__).resolve().parents[1].parent / "shared" / "data")
PROGRAMS = Path(__file__).resolve().parent / "programs"
CLIENTS = ndvm.clients()


def shared_json(name):
    """Load a file of ../shared/data, or skip the test when the directory is absent."""
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(f"reference data {path} is not available")
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
