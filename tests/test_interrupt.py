"""Ctrl-C during a search: the result and the record file keep the same candidates, each once,
wherever the interrupt lands (a CI run caught a record file 16 lines longer than its summary:
the interrupt came after a batch's lines were written and before they were marked written, so
the interrupt handler wrote them again)."""
import json
import signal
import sys

import pytest

import ndvm
from ndvm.cosearch import records
from ndvm.cosearch.records import RECORD_FILE, SUMMARY_FILE, holding, uninterrupted

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGINT")


@pytest.fixture(autouse=True)
def _ctrl_c_raises():
    """Ctrl-C raises KeyboardInterrupt in this process during each test, as in a terminal (a
    suite started as a background job inherits SIGINT ignored, and Python leaves it so)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def test_an_interrupt_inside_takes_effect_when_the_body_ends():
    before = signal.getsignal(signal.SIGINT)
    done = []
    with pytest.raises(KeyboardInterrupt), uninterrupted():
        signal.raise_signal(signal.SIGINT)
        done.append("rest of the body")
    assert done == ["rest of the body"]
    assert signal.getsignal(signal.SIGINT) is before
    with uninterrupted():  # (nothing arrives: nothing raised)
        done.append("again")
    assert signal.getsignal(signal.SIGINT) is before


def test_a_handler_of_the_users_gets_the_deferred_signal():
    got = []
    before = signal.signal(signal.SIGINT, lambda *a: got.append("handled"))
    try:
        with uninterrupted():
            signal.raise_signal(signal.SIGINT)
            assert got == []
        assert got == ["handled"]
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_sigterm_with_a_python_handler_is_deferred_too():
    # (the command line's handler raises, as Ctrl-C does: a batch's records stay whole)
    got, done = [], []
    before = signal.signal(signal.SIGTERM, lambda *a: got.append("handled"))
    try:
        with uninterrupted():
            signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGINT)
            done.append("rest of the body")
            assert got == []
        pytest.fail("the deferred Ctrl-C was not raised")
    except KeyboardInterrupt:
        assert got == ["handled"] and done == ["rest of the body"]
    finally:
        signal.signal(signal.SIGTERM, before)
    assert signal.getsignal(signal.SIGTERM) is before


def test_holding_installs_the_handlers_once_and_each_body_inside_still_defers(monkeypatch):
    # (a search keeps a batch in an uninterrupted() body every round, inside one holding())
    before = signal.getsignal(signal.SIGINT)
    plain, calls = signal.signal, []
    monkeypatch.setattr(signal, "signal", lambda *a: calls.append(a) or plain(*a))
    done = []
    with holding():
        installed = len(calls)
        assert installed >= 1 and signal.getsignal(signal.SIGINT) is not before
        for k in range(3):
            with uninterrupted():
                done.append(k)
        with pytest.raises(KeyboardInterrupt), uninterrupted():
            with uninterrupted():  # (nested: delivered when the outermost body ends)
                signal.raise_signal(signal.SIGINT)
                done.append("inner")
            done.append("outer")
        assert len(calls) == installed  # (no handler set again a body)
        with pytest.raises(KeyboardInterrupt):  # (outside a body: at once, as before)
            signal.raise_signal(signal.SIGINT)
            for _ in range(100):
                done.append("not reached")
    assert done == [0, 1, 2, "inner", "outer"]
    assert signal.getsignal(signal.SIGINT) is before


def test_an_island_search_installs_the_deferral_once_not_once_an_epoch(monkeypatch):
    # (the coordinator keeps each epoch's records in an uninterrupted() body, inside one
    # holding() for the whole search: eight epochs here)
    plain, calls = signal.signal, []
    monkeypatch.setattr(signal, "signal", lambda *a: calls.append(a) or plain(*a))
    before = signal.getsignal(signal.SIGINT)
    res = ndvm.search("damped", seed=0, max_candidates=512, budget=None, workers=1, islands=2,
                      migration_every=64, progress=False)
    assert len(res.records) >= 512 and res.stopped == "candidates"
    assert 1 <= len(calls) <= 4  # (installed and restored once: SIGINT, SIGTERM if handled)
    assert signal.getsignal(signal.SIGINT) is before


def test_holding_passes_a_users_handler_its_signals():
    got = []

    def users(*_):
        got.append("handled")

    before = signal.signal(signal.SIGTERM, users)
    try:
        with holding():
            signal.raise_signal(signal.SIGTERM)
            assert got == ["handled"]
            with uninterrupted():
                signal.raise_signal(signal.SIGTERM)
                signal.raise_signal(signal.SIGTERM)
                assert got == ["handled"]
            assert got == ["handled", "handled"]  # (once, however many came)
        assert signal.getsignal(signal.SIGTERM) is users
    finally:
        signal.signal(signal.SIGTERM, before)


class _CtrlCWhileWriting:
    """The record file, with a Ctrl-C as its ``at``-th batch is written (``when``: "write",
    before its lines are; "flush", after they are)."""

    def __init__(self, f, when, at):
        self.f, self.when, self.at, self.n = f, when, at, {"write": 0, "flush": 0}

    def _call(self, step, *args):
        if step == "flush":
            self.f.flush()
        self.n[step] += 1
        if step == self.when and self.n[step] == self.at:
            signal.raise_signal(signal.SIGINT)
        if step == "write":
            return self.f.write(*args)

    def write(self, text):
        return self._call("write", text)

    def flush(self):
        self._call("flush")

    def __getattr__(self, name):  # (the rest as the file's: fileno for its lock, truncate)
        return getattr(self.f, name)


@pytest.mark.parametrize("islands", [1, 2])
@pytest.mark.parametrize("when", ["write", "flush"])
@pytest.mark.parametrize("at", [1, 3])
def test_ctrl_c_while_writing_keeps_each_candidate_once(islands, when, at, tmp_path, monkeypatch):
    real_open = open
    monkeypatch.setattr(records, "open",  # (the run folder's record file: records._open_run)
                        lambda *a, **k: _CtrlCWhileWriting(real_open(*a, **k), when, at),
                        raising=False)
    out = tmp_path / "run"
    res = ndvm.search("damped", seed=0, max_candidates=4096, budget=None, workers=1,
                      islands=islands, migration_every=64, out=out, progress=False)
    assert res.stopped == "interrupted"
    ids = [json.loads(line)["id"] for line in (out / RECORD_FILE).read_text().splitlines()]
    assert len(ids) == len(set(ids)), "a record written twice"
    assert sorted(ids) == sorted(r["id"] for r in res.records), "the file and the result differ"
    assert json.loads((out / SUMMARY_FILE).read_text())["candidates"] == len(ids) > 0
