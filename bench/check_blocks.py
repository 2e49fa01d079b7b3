"""The data analysis's outputs old vs new (structure.py): each Feynman equation's (seed 0 data)
and srbench problem's (seed 0) single_indices (the best 10, signed and absolute: exponents,
outer exponents and R^2 as float.hex) and building_blocks (sources) dumped by the ndvm of the
running Python (python check_blocks.py OUT.pkl, once with each build), then compared (python
check_blocks.py --compare OLD.pkl NEW.pkl): the indices and blocks in the same order, and the
largest change of an R^2 where the bits differ."""
import pickle
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _hex(v):
    return None if v is None else [float(x).hex() for x in np.ravel(v)]


def dump(out):
    import feynman
    import srbench

    from ndvm.cosearch import structure
    from ndvm.cosearch.grammar import Grammar
    from ndvm.cosearch.sexpr import to_source
    cases = [(f"feynman {e.id}", feynman.make_data(e, 0)[:2]) for e in feynman.load_equations()]
    cases += [(f"srbench {p}", srbench.make_data(p, 0)[:2]) for p in srbench.PROBLEMS]
    res = {}
    t0 = time.time()
    for name, (X, y) in cases:
        g = Grammar(inputs=tuple(f"x{i}" for i in range(X.shape[1])),
                    params=("a", "b", "c", "d", "f", "g"), loop=False)
        with np.errstate(all="ignore"):
            si = [(k, _hex(a), _hex(r2)) for k, a, r2 in structure.single_indices(X, y, count=10)]
            sa = [(k, _hex(a), _hex(r2))
                  for k, a, r2 in structure.single_indices(X, y, count=10, absolute=True)]
        bb = [to_source(t) for t in structure.building_blocks(g, X, y)]
        res[name] = (si, sa, bb)
    print(len(res), "cases", round(time.time() - t0, 1), "s")
    Path(out).write_bytes(pickle.dumps(res))


def compare(a, b):
    A, B = (pickle.loads(Path(p).read_bytes()) for p in (a, b))
    assert A.keys() == B.keys()
    bad = 0
    worst = 0.0
    for k in A:
        (si, sa, bb), (si2, sa2, bb2) = A[k], B[k]
        if bb != bb2:
            bad += 1
            print("BLOCKS DIFFER", k)
        for x, y in ((si, si2), (sa, sa2)):
            if [e[0] for e in x] != [e[0] for e in y]:
                bad += 1
                print("INDICES DIFFER", k, x[:3], y[:3])
            elif x != y:
                for e, f in zip(x, y):
                    r, s = float.fromhex(e[2][0]), float.fromhex(f[2][0])
                    worst = max(worst, abs(r - s))
                print("values differ (same indices)", k)
    print(len(A), "cases;", bad, "differ in indices or blocks; largest |R^2 change|", worst)


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        compare(sys.argv[2], sys.argv[3])
    else:
        dump(sys.argv[1])
