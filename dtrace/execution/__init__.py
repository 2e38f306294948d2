"""Where a run's work happens and what each piece of it does, below the API.

- :mod:`~dtrace.execution.engine`: the only module that talks to Dask (in-process, local
  cluster, an existing cluster or batch jobs), failure splitting, progress;
- :mod:`~dtrace.execution.tasks`: the module-level functions the engine maps (ingest a batch of
  files, analyse a partition with the result store and bisection of failures);
- :mod:`~dtrace.execution.summaries`: ``nsys stats`` summaries as results tables (they carry no
  events and skip ingest and analysis).
"""
