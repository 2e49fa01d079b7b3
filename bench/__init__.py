"""Benchmarks (pytest-benchmark) and the report that turns their JSON into tables and charts.

Run from the checkout (``python -m bench.run``, ``pytest bench``), the checkout's folder comes
first on sys.path, and its ``ndvm/`` (source only, no compiled extension after a regular
``pip install .``) would shadow the installed package; importing ``bench`` moves the checkout
behind the installed packages and imports ndvm from there, so the suite measures what was
installed.
"""
import importlib.machinery
import importlib.util
import sys
from pathlib import Path


def _prefer_installed_ndvm():
    root = Path(__file__).resolve().parent.parent
    if "ndvm" in sys.modules:
        return
    spec = importlib.util.find_spec("ndvm")
    # an editable install's finder (or an in-place build) serves the checkout: nothing to do
    if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
        return
    if Path(spec.origin).resolve().parent != root / "ndvm":
        return
    core = root / "ndvm" / "_core"
    if any(core.glob("_core.*.so")) or any(core.glob("_core.*.pyd")):
        return
    ahead = [p for p in sys.path if Path(p or ".").resolve() == root]
    for p in ahead:
        sys.path.remove(p)
    sys.path.extend(ahead)  # still importable (bench itself), but after site-packages
    # import it now: pytest puts the checkout first again before each test module it imports
    try:
        import ndvm  # noqa: F401
    except ImportError:  # not installed either: ndvm's own error says what to do
        pass


_prefer_installed_ndvm()
