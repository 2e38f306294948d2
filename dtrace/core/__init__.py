"""The shared vocabulary and the event table: names every layer spells the same way, file access, units,
declared dtypes, the event schema and the typed JSON records.

- :mod:`~dtrace.core.constants`: event kinds, GPU kinds, copy kinds, collective names, limits;
- :mod:`~dtrace.core.fileio`: reading only regular files, atomic writes;
- :mod:`~dtrace.core.units`: integer ns and bytes as readable text;
- :mod:`~dtrace.core.dtypes`: the declared dtypes of the results tables, ``conform``;
- :mod:`~dtrace.core.schema`: the normalized event table and its side tables, validated in one function;
- :mod:`~dtrace.core.records`: msgspec Structs of the JSON files dtrace writes and reads back.

Nothing here imports another layer of dtrace but :mod:`dtrace.errors`.
"""
