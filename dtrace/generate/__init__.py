"""Generated inputs with known answers: synthetic cluster jobs (:mod:`~dtrace.generate.synth`)
and a real trace tiled in time and across ranks for benchmarks (:mod:`~dtrace.generate.tile`).
"""
