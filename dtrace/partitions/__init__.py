"""How the parts of a job are laid out for analysis, and what is stored of each group of them.

- :mod:`~dtrace.partitions.layout`: store groups (whole ranks), partitions (store groups batched
  to a target number of events) and ingest batches (files grouped by size);
- :mod:`~dtrace.partitions.store`: the result store, each store group's result tables kept
  between runs under a key of everything they depend on.
"""
