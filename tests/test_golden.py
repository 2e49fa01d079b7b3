"""Golden programs in tests/programs/*.scm, run under every client.

Header comments declare inputs and the expectation:
    ; params: a=1.5 b=2        ; data: x=1,2,3        ; consts: obs=0.5,0.1
    ; expect: 3628800          or   ; expect error: EvalError line 3
"""
import math
import re

import numpy as np
import pytest

import ndvm
from conftest import CLIENTS, PROGRAMS

FILES = sorted(PROGRAMS.glob("*.scm"))


def _bindings(text, key):
    out = {}
    m = re.search(rf"^; {key}: (.*)$", text, re.M)
    if m:
        for item in m.group(1).split():
            name, values = item.split("=")
            vals = [float(v) for v in values.split(",")]
            out[name] = vals[0] if len(vals) == 1 else np.array(vals)
    return out


def parse_expectation(text):
    m = re.search(r"^; expect error: (\w+) line (\d+)$", text, re.M)
    if m:
        return ("error", m.group(1), int(m.group(2)))
    m = re.search(r"^; expect: (\S+)$", text, re.M)
    assert m, "a golden program needs '; expect:' or '; expect error:'"
    return ("value", float(m.group(1)), None)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_golden(path, client):
    text = path.read_text()
    kind, want, line = parse_expectation(text)
    ev = ndvm.Evaluator(client=client, max_steps=20_000_000)
    inputs = dict(params=_bindings(text, "params"), data=_bindings(text, "data"),
                  consts=_bindings(text, "consts"))
    if kind == "error":
        with pytest.raises(ndvm.SchemeError) as info:
            ev.evaluate(ndvm.parse(text, path.name), grad=True, **inputs)
        err = info.value
        assert err.kind == want, str(err)
        assert err.line == line, str(err)
        assert err.col is not None and err.col >= 1
        assert err.file == path.name
        return
    res = ev.evaluate(ndvm.parse(text, path.name), grad=True, **inputs)
    got = res.value[0, 0]
    if math.isinf(want):
        assert got == want
    else:
        assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
