"""Client discovery. ``ndvm.clients()`` lists the clients; ``ndvm.clients.get(name)`` loads one.

Clients register under the ``ndvm.clients`` entry-point group (``name = "module:OBJECT"``), so a
third client is a package of its own that needs no edit here. A client object has ``name``,
``entry`` (the address of its native entry point) and ``compile(program)``; a client whose
``compile`` gives every program the same form (dmci's 0: it walks the expanded tree) may say so
as ``fixed_form``, and a search's validation then takes it without a call a candidate.
"""
import sys
import threading
import types
from importlib import import_module
from importlib.metadata import entry_points

__all__ = ["available", "get"]

# Used when the package metadata is not visible (e.g. running from a build tree).
_BUILTIN = {"dmci": "ndvm.clients.dmci:CLIENT", "bytecode": "ndvm.clients.bytecode:CLIENT"}
_loaded = {}
_lock = threading.Lock()


def _specs():
    specs = {}
    for ep in entry_points(group="ndvm.clients"):
        specs[ep.name] = ep.value
    for name, value in _BUILTIN.items():
        specs.setdefault(name, value)
    return specs


def _load(value):
    module, _, attr = value.partition(":")
    return getattr(import_module(module), attr)


def available():
    """Names of the clients that can be loaded, sorted."""
    names = []
    for name, value in _specs().items():
        try:
            get(name, _value=value)
        except ImportError:
            continue
        names.append(name)
    return tuple(sorted(names))


def get(name, _value=None):
    """The client object registered as ``name``; ValueError if there is none."""
    with _lock:
        client = _loaded.get(name)
        if client is not None:
            return client
        value = _value or _specs().get(name)
        if value is None:
            raise ValueError(f"unknown client {name!r}; available: {', '.join(available_names())}")
        client = _load(value)
        _loaded[name] = client
        return client


def available_names():
    return sorted(_specs())


class _CallableModule(types.ModuleType):
    """Lets ``ndvm.clients()`` list the clients while ``ndvm.clients.dmci`` stays a subpackage."""

    def __call__(self):
        return available()


sys.modules[__name__].__class__ = _CallableModule
