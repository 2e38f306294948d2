"""The "GPU Performance Analyser" workflow on ``nsys stats`` output and Nsight Systems reports.

- :mod:`.csvfiles`: parse ``nsys stats`` CSVs (header found by name, old and new spellings);
- :mod:`.config`: the tool's JSON config (``inputs``, ``analysis_args``, ``kernel_to_class_map``);
- :mod:`.report`: per-iteration kernel, class, NCCL, memory-operation and NVTX figures, and
  their text rendering (``dtrace nsys-stats``);
- :mod:`.summary`: summary-level inputs in ``dtrace analyze`` (tables computed from
  summaries, the manifest saying which tables they cannot give).

This package imports nothing heavy at import time: the CSV reader registry imports
:mod:`.csvfiles`.
"""
