"""GPU event categories (docs/semantics.md, "GPU categories"): ``compute``, ``comm``, ``memcpy``, ``memset``.

The patterns live in one table, :data:`PATTERNS`; classification runs once per distinct
name (``categorize_names``), never per event.
"""

from __future__ import annotations

import functools
import re
from typing import Iterable, cast

import numpy as np
import pandas as pd

from ..vector.groups import unique_inverse

CATEGORIES = ("compute", "comm", "memcpy", "memset")

PATTERNS: dict[str, str] = {
    # kernels whose name matches become communication (case-insensitive re.search)
    "comm": r"nccl|rccl|cross_device_reduce",
    # known collective kernels without nccl in the name (default mode only)
    "comm_extra": r"multimem_all_reduce|multimem_all_gather|multimem_reduce_scatter|one_shot_all_reduce"
    r"|two_shot_all_reduce|symm_mem|custom_all_reduce|allreduce_(one|two)_?shot",
    # kernels that are really copies
    "memcpy_kernel": r"^__amd_rocclr_copy(Buffer|Image)|^__amd_rocclr_fill",
    # JAX (TraceLens rule): names starting with these are memory operations
    "jax_memcpy": r"^(copy|memcpy|memset)",
}

_MODES = ("default", "tracelens")


def categorize_names(
    names: Iterable[str],
    kinds: Iterable[str],
    *,
    compat: str = "default",
    fmt: str = "kineto",
    patterns: dict[str, str] | None = None,
) -> list[str]:
    """Category of each (name, kind) pair.

    Parameters
    ----------
    names, kinds
        Distinct event names and their schema kind (``kernel``, ``memcpy``, ``memset``).
    compat
        ``"default"`` or ``"tracelens"`` (TraceLens ``GPUEventAnalyser`` rules: memset counts as
        compute, no extra collective kernels; for JAX only ``copy*/memcpy*/memset*`` names are memcpy).
    fmt
        The input format; JAX has its own memcpy rule in TraceLens mode, and for rocprofv3
        TraceLens counts every kernel dispatch as a kernel (its copy kernels included).

    Examples
    --------
    >>> categorize_names(["ncclKernel_AllReduce", "sgemm", "Memcpy HtoD", "multimem_all_reduce_kernel"],
    ...                  ["kernel", "kernel", "memcpy", "kernel"])
    ['comm', 'compute', 'memcpy', 'comm']
    """
    if compat not in _MODES:
        raise ValueError(f"unknown compat mode {compat!r}; valid: {', '.join(_MODES)}")
    if patterns:
        rules = _Rules({**PATTERNS, **patterns}, compat == "tracelens", fmt)
        return [rules.category(name or "", kind) for name, kind in zip(names, kinds)]
    return [_category(name or "", kind, compat == "tracelens", fmt) for name, kind in zip(names, kinds)]


@functools.lru_cache(maxsize=16)
def _rules(tl: bool, fmt: str) -> "_Rules":
    """The built-in rules of one mode and format (compiled once per process)."""
    return _Rules(dict(PATTERNS), tl, fmt)


@functools.lru_cache(maxsize=1 << 16)
def _category(name: str, kind: str, tl: bool, fmt: str) -> str:
    """The built-in category of one (name, kind) pair, kept per process (the parts of a job
    repeat the same names)."""
    return _rules(tl, fmt).category(name, kind)


class _Rules:
    """The category rules of one mode and format, their patterns compiled once."""

    def __init__(self, p: dict[str, str], tl: bool, fmt: str) -> None:
        self.comm = re.compile(p["comm"], re.I)
        self.extra = re.compile(p["comm_extra"], re.I)
        self.copyk = re.compile(p["memcpy_kernel"], re.I)
        self.jaxmem = re.compile(p["jax_memcpy"], re.I)
        self.tl, self.fmt = tl, fmt

    def category(self, name: str, kind: str) -> str:
        """The category of one (name, kind) pair."""
        tl = self.tl
        if self.comm.search(name) or (not tl and self.extra.search(name)):
            return "comm"
        if self.fmt == "jax" and tl:
            return "memcpy" if self.jaxmem.search(name) else "compute"
        if kind == "memcpy" or (self.copyk.search(name) and not (tl and self.fmt == "rocprofv3")):
            return "memcpy"
        if kind == "memset":
            return "compute" if tl else "memset"
        return "compute"


def categorize(
    names: pd.Series,
    kinds: pd.Series,
    *,
    compat: str = "default",
    fmt: str = "kineto",
    patterns: dict[str, str] | None = None,
) -> np.ndarray:
    """Category of each event: classify distinct (name, kind) pairs, then broadcast codes."""
    if len(names) == 0:
        return np.empty(0, dtype=object)
    # integer codes of names (a categorical's own codes) and kinds, combined into one pair code:
    # no per-event strings or tuples, and classification runs on the distinct pairs only
    ncodes, nuniq = pd.factorize(names, use_na_sentinel=False)
    kcodes, kuniq = pd.factorize(kinds, use_na_sentinel=False)
    nk = max(len(kuniq), 1)
    upair, inv = unique_inverse(ncodes.astype(np.int64) * nk + kcodes)
    cats = categorize_names(
        [str(x) for x in np.asarray(nuniq, dtype=object)[upair // nk]],
        [str(x) for x in np.asarray(kuniq, dtype=object)[upair % nk]],
        compat=compat,
        fmt=fmt,
        patterns=patterns,
    )
    return cast(np.ndarray, np.asarray(cats, dtype=object)[inv.reshape(-1)])
