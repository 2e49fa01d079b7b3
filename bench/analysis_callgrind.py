"""One structure.single_indices on a Feynman equation's data (seed 0) of the running Python's
ndvm, called through itertools.starmap so that callgrind counts it alone:
OPENBLAS_NUM_THREADS=1 valgrind --tool=callgrind --toggle-collect='starmap_next' python
analysis_callgrind.py EQ_ID (e.g. I.9.18; nothing else in the run uses itertools.starmap)."""
import itertools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import feynman

from ndvm.cosearch import structure

eq = next(e for e in feynman.load_equations() if e.id == sys.argv[1])
X, y, _, _ = feynman.make_data(eq, 0)
np.seterr(all="ignore")
structure.single_indices(X[:300], y[:300])  # (warm: caches, lazy imports)
found = next(itertools.starmap(structure.single_indices, [(X, y)]))
print(len(found), found[0][0], found[0][2])
