"""What you do with a finished analysis beyond its tables: built on :mod:`dtrace.api`.

- :mod:`~dtrace.explore.events`: ``dtrace.events()``, the cached events as a lazy Dask DataFrame,
  and ``recompute`` of per-partition tables with other settings;
- :mod:`~dtrace.explore.timeline`: ``dtrace.timeline()``, a few ranks' cached events aligned as a
  Chrome / Perfetto trace;
- :mod:`~dtrace.explore.tree`: ``dtrace.tree()``, one (rank, device) opened as a host op tree;
- :mod:`~dtrace.explore.diff`: the differences between two analyses.
"""
