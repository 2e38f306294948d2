"""From inputs to cached Parquet, on the client and in the ingest tasks: everything before partitions.

- :mod:`~dtrace.ingest.remote`: inputs on object stores (URLs), listed, stat-ed and copied locally;
- :mod:`~dtrace.ingest.cache`: each input parsed once into Parquet and reused while unchanged;
- :mod:`~dtrace.ingest.inputs`: files, folders, globs and URLs expanded into trace files;
- :mod:`~dtrace.ingest.ranks`: every (file, device) given its global rank → ``PartSpec``.

This module imports nothing, so ``dtrace.ingest.inputs`` stays free of pandas and pyarrow.
"""
