"""Vectorised primitives on numpy arrays, for computations grouped by part (and stream, step, ...).

- :mod:`~dtrace.vector.groups`: dense group codes, ``sum_by``/``min_by``/..., lookups, fast ``unique``;
- :mod:`~dtrace.vector.intervals`: interval unions, differences and overlaps per group.
"""
