"""What dtrace knows about GPU work, independent of any trace: event categories, kernel classes,
hardware peaks and op performance models.

- :mod:`~dtrace.knowledge.categories`: the GPU category of an event (compute, comm, memcpy, memset);
- :mod:`~dtrace.knowledge.classify`: kernel classes, the built-in classifier and class maps;
- :mod:`~dtrace.knowledge.hardware`: the bundled GPU table (``dtrace/data/gpus.json``), spec files, matching a device;
- :mod:`~dtrace.knowledge.opmodel`: FLOPs and bytes of a host op from its recorded shapes and dtypes.

The four are independent of each other (pyproject.toml, ``[tool.importlinter]``).
"""
