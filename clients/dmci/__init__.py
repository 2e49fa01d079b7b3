"""dmci: the tree-walking client. It walks the expanded S-expression tree natively (C++)."""
from ndvm.clients.dmci._dmci import entry_address


class DmciClient:
    """Walks the program's expanded tree directly; nothing to compile."""

    name = "dmci"
    entry = entry_address()
    fixed_form = 0  # (what ``compile`` gives every program: ndvm.clients)

    def compile(self, program):
        """dmci needs no compiled form: the core's expanded tree is what it walks."""
        return self.fixed_form


CLIENT = DmciClient()
__all__ = ["CLIENT", "DmciClient"]
