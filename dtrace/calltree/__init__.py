"""Host op → GPU kernel tree (Trace2Tree at cluster scale; docs/semantics.md, "Host op tree and ops").

- :mod:`.build`: vectorised construction (nesting by time containment, depths, subtrees,
  correlation links, grouped interval unions);
- :mod:`.model`: the :class:`Tree` and its queries (lookups, parents, children, subtrees,
  launcher op, GPU time per op, forward/backward links, the per-op table);
- :mod:`.printer`: the text views, down and up;

Opening one (rank, device) of a trace, of traces or of results as a tree (:func:`dtrace.tree`)
is :mod:`dtrace.explore.tree`, a layer above: the tree itself reads no file.

The package is named ``calltree`` rather than ``tree`` because ``dtrace.tree`` is the API
function; a subpackage of the same name would be shadowed by it.
"""

from __future__ import annotations

from .model import KINDS, Tree

__all__ = ["Tree", "KINDS"]
