"""Callgrind's count inside some Python functions of a search: a damped 4-island search of
argv[1] candidates (seed 1, one worker: /tmp/one.py's) with the functions argv[2] names
(comma-separated ``module:attr.path``) called through ``operator.call``, whose C function
``_operator_call`` callgrind can toggle on. A zone nested in another is not counted (a toggle
inside a toggle switches collection off).

    PYTHONHASHSEED=0 OPENBLAS_NUM_THREADS=1 valgrind --tool=callgrind \\
        --toggle-collect=_operator_call python zone_callgrind.py 512 \\
        ndvm.cosearch.rounds:_Rounds.finish
"""
import importlib
import operator
import sys

import ndvm


def _zoned(f):
    """``f`` called through ``operator.call``."""
    def zoned(*args, **kwargs):
        return operator.call(f, *args, **kwargs)
    return zoned


for spec in sys.argv[2].split(","):
    module, path = spec.split(":")
    owner = importlib.import_module(module)
    *parents, name = path.split(".")
    for p in parents:
        owner = getattr(owner, p)
    f = owner.__dict__[name]
    setattr(owner, name, staticmethod(_zoned(f.__func__)) if isinstance(f, staticmethod)
            else _zoned(f))
ndvm.search("damped", max_candidates=int(sys.argv[1]), seed=1, islands=4, budget=3600,
            migration_every=256, workers=1)
