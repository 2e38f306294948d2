"""Flags shared by several commands, mapped one to one onto keyword arguments."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from contextlib import contextmanager
from dataclasses import fields
from typing import Any, Callable, Iterator

from ..core.constants import OUTPUT_FORMATS
from ..core.fileio import atomic_write
from ..errors import InputError, OutputError, UsageError
from ..options import (
    COMPAT,
    CUDA_QUEUE_LIMIT,
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    MAX_TIME_NS,
    RANK_BY,
    WHOLE,
    Options,
)
from ..render.escape import markdown_text, printable

DEFAULTS = Options()
"""The analysis settings' defaults, as :class:`~dtrace.options.Options` holds them (the flags'
help texts quote them)."""


def _us(ns: int) -> str:
    """A default time setting in µs for a help text: ``30_000`` → ``30 µs``."""
    return f"{ns / 1000:g} µs"


def add_analysis_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("analysis")
    g.add_argument(
        "--compat",
        choices=COMPAT,
        default=DEFAULTS.compat,
        help="reproduce a peer tool's numbers exactly (tracelens: GPUEventAnalyser rules)",
    )
    g.add_argument("--linked-only", action="store_true", help="keep only GPU events linked to a host launch")
    g.add_argument(
        "--step", type=option_number("step"), default=None, help="keep only this step (iteration) in every table"
    )
    g.add_argument("--step-pattern", default=None, help="regex on annotation names marking a step (group 1 = number)")
    g.add_argument(
        "--rank-by",
        choices=RANK_BY,
        default=DEFAULTS.rank_by,
        help="auto: distributedInfo, then rank<N> in the file name; order: sorted input order",
    )
    g.add_argument("--format", dest="input_format", default=None, help="force an input format (default: detect)")
    g.add_argument(
        "--gpus-per-host",
        type=option_number("gpus_per_host"),
        default=None,
        help=f"ranks r // N share a host clock (default {DEFAULTS.gpus_per_host}; "
        "0: one clock per rank) when clock offsets are removed from collectives",
    )
    g.add_argument(
        "--straggler-method",
        default=None,
        help=f"straggler detector: {DEFAULTS.straggler_method} (default) or late_start",
    )
    g.add_argument(
        "--gpu-spec",
        metavar="FILE",
        default=None,
        help="GPU peaks (JSON) that override or add to the bundled table for the roofline, e.g. measured "
        "'max achievable' figures (docs/semantics.md, 'Hardware peaks')",
    )
    add_kernel_gap_options(g)
    add_host_options(g)


# -- numbers: every numeric flag of every command is parsed and bounded here -------------------
INT32_MIN = -(2**31)
MAX_US = MAX_TIME_NS // 1000
"""The largest time flag in µs (11.6 days; its ns fit int64)."""


def number(text: str, lo: float, hi: float, *, whole: bool = False, above: bool = False) -> float:
    """``text`` as a finite number in ``[lo, hi]`` (``(lo, hi]`` with ``above``), an int if ``whole``.

    Raises :class:`UsageError` saying the rule: ``inf``, ``nan``, ``1e309``, a number out of range
    or (for ``whole``) one with a fraction or an exponent.

    Examples
    --------
    >>> number("1.5", 0, 10), number("7", 1, 8, whole=True)
    (1.5, 7)
    >>> number("1e309", 0, 10)
    Traceback (most recent call last):
    dtrace.errors.UsageError: '1e309' is not a finite number: give a number from 0 to 10
    >>> number("9" * 400, 1, 8, whole=True)
    Traceback (most recent call last):
    dtrace.errors.UsageError: 99999999999999999999…(400 characters) is out of range: give a whole number from 1 to 8
    """
    span = f"above {_num(lo)} and up to {_num(hi)}" if above else f"from {_num(lo)} to {_num(hi)}"
    rule = f"give a {'whole number' if whole else 'number'} {span}"
    try:
        v: float = int(text.strip()) if whole else float(text)
    except ValueError:
        raise UsageError(f"{text!r} is not a {'whole number' if whole else 'number'}: {rule}") from None
    if not whole and not math.isfinite(v):  # a whole number is finite (and may not fit a float: 400 digits)
        raise UsageError(f"{text!r} is not a finite number: {rule}")
    if not (lo < v if above else lo <= v) or not v <= hi:
        shown = text if len(text) <= 40 else f"{text[:20]}…({len(text):,} characters)"
        raise UsageError(f"{shown} is out of range: {rule}")
    return v


def _num(x: float) -> str:
    """A bound for people: ``2,147,483,647``, ``0.001``."""
    if isinstance(x, int) or (float(x).is_integer() and abs(x) < 1e18):
        return f"{int(x):,}"
    return f"{x:g}"


def _flag_type(parse: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    """An argparse ``type=``: a :class:`UsageError` of ``parse`` becomes argparse's one-line error."""

    def check(text: str) -> Any:
        try:
            return parse(text)
        except UsageError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    check.__name__ = name
    return check


def whole(lo: int, hi: int) -> Callable[[str], int]:
    """The ``type=`` of a whole-number flag in ``[lo, hi]``."""
    return _flag_type(lambda t: int(number(t, lo, hi, whole=True)), "whole number")


def option_number(name: str) -> Callable[[str], int]:
    """The ``type=`` of the flag of the whole-number setting ``name`` of
    :class:`~dtrace.options.Options`, bounded as the setting is (:data:`dtrace.options.WHOLE`)."""
    lo, hi, _ = WHOLE[name]
    return whole(lo, hi)


def real(lo: float, hi: float, *, above: bool = False) -> Callable[[str], float]:
    """The ``type=`` of a finite real-number flag in ``[lo, hi]`` (``(lo, hi]`` with ``above``)."""
    return _flag_type(lambda t: float(number(t, lo, hi, above=above)), "number")


def micros(text: str) -> int:
    """A time flag in µs (fractions allowed, 0 to :data:`MAX_US`) → integer ns."""
    return int(round(number(text, 0, MAX_US) * 1000))


MICROS = _flag_type(micros, "time in µs")
RANK = whole(0, INT32_MAX)
DEVICE = whole(INT32_MIN, INT32_MAX)
ID = whole(INT64_MIN, INT64_MAX)
COUNT = whole(0, INT64_MAX)
SPEEDUP_RANGE = (1e-3, 1e3)
"""How much faster or slower a what-if (or a generated counterfactual) may make a class."""


def add_kernel_gap_options(g: argparse._ArgumentGroup) -> None:
    """Kernel-class, per-iteration and gap flags (dest == Options field; times in µs → ns)."""
    g.add_argument(
        "--classmap",
        default=None,
        metavar="FILE",
        type=os.path.abspath,
        help="class map JSON: {substring: class}, a config with kernel_to_class_map, "
        "or {engine: {model: {regex: category}}}",
    )
    g.add_argument("--engine", dest="classmap_engine", default=None, help="engine of a regex class map")
    g.add_argument("--model", dest="classmap_model", default=None, help="model of a regex class map")
    g.add_argument(
        "--iters",
        type=option_number("iters"),
        default=None,
        help="iterations in the trace for per-iteration figures (default: steps found)",
    )
    g.add_argument(
        "--summary-gpus",
        type=option_number("summary_gpus"),
        default=None,
        metavar="N",
        help="GPUs an nsys stats summary CSV covers (per-iteration figures divide by iters x N)",
    )
    g.add_argument(
        "--hist-min",
        dest="hist_min_ns",
        type=MICROS,
        default=None,
        metavar="US",
        help="gap histogram lower bound in µs (default: smallest gap)",
    )
    g.add_argument(
        "--hist-max",
        dest="hist_max_ns",
        type=MICROS,
        default=None,
        metavar="US",
        help="gap histogram upper bound in µs (default: largest gap)",
    )
    g.add_argument(
        "--hist-bins",
        type=option_number("hist_bins"),
        default=None,
        help=f"gap histogram bins (default {DEFAULTS.hist_bins}, at most {WHOLE['hist_bins'][1]:,})",
    )
    add_hist_spacing(g)
    g.add_argument(
        "--kernel-wait-us",
        dest="kernel_wait_ns",
        type=MICROS,
        default=None,
        metavar="US",
        help=f"gaps launched in time and shorter than this are kernel_wait (default {_us(DEFAULTS.kernel_wait_ns)})",
    )


def _launch_rows(text: str) -> int | str:
    """``--launch-rows``: a number of rows >= 0, or ``all``."""
    if text == "all":
        return text
    try:
        lo, hi, _ = WHOLE["launch_rows"]
        return int(number(text, lo, hi, whole=True))
    except UsageError as exc:
        raise UsageError(f"not a number of rows or 'all': {exc}") from None


LAUNCH_ROWS = _flag_type(_launch_rows, "number of rows or 'all'")


def add_host_options(g: argparse._ArgumentGroup) -> None:
    """Launch statistics, launch queue and time series flags (dest == Options field; µs → ns)."""
    g.add_argument(
        "--launch-runtime-cutoff",
        dest="launch_runtime_cutoff_ns",
        type=MICROS,
        default=None,
        metavar="US",
        help=f"a launch call longer than this is an outlier (default {_us(DEFAULTS.launch_runtime_cutoff_ns)})",
    )
    g.add_argument(
        "--launch-delay-cutoff",
        dest="launch_delay_cutoff_ns",
        type=MICROS,
        default=None,
        metavar="US",
        help=f"a launch delay longer than this is an outlier (default {_us(DEFAULTS.launch_delay_cutoff_ns)})",
    )
    g.add_argument(
        "--launch-rows",
        type=LAUNCH_ROWS,
        default=None,
        metavar="N|all",
        help=f"outliers per GPU kept in the launches table (default {DEFAULTS.launch_rows}); all: every launched GPU event",
    )
    g.add_argument(
        "--queue-limit",
        type=option_number("queue_limit"),
        default=None,
        metavar="N",
        help=f"launch queue length at which the host blocks (default: the runtime's, {CUDA_QUEUE_LIMIT} for CUDA, "
        "none for ROCm)",
    )
    g.add_argument(
        "--timeline-bins",
        type=option_number("timeline_bins"),
        default=None,
        metavar="N",
        help=f"bins of the time series (queue, memory, copy bandwidth) per GPU (default {DEFAULTS.timeline_bins})",
    )
    g.add_argument(
        "--sequence-min-len",
        type=option_number("sequence_min_len"),
        default=None,
        metavar="N",
        help="fewest GPU events of a top-level op's kernel sequence in the kernel_sequences table "
        f"(default {DEFAULTS.sequence_min_len})",
    )


def add_hist_spacing(g: Any) -> None:
    """``--hist-log`` / ``--hist-linear`` (``hist_log``; neither: logarithmic bins where the range
    spans two decades or more, else linear)."""
    spacing = g.add_mutually_exclusive_group()
    spacing.add_argument(
        "--hist-log",
        dest="hist_log",
        action="store_const",
        const=True,
        default=None,
        help="logarithmic gap histogram bins (default: logarithmic when the range spans two decades, else linear)",
    )
    spacing.add_argument(
        "--hist-linear", dest="hist_log", action="store_const", const=False, help="linear gap histogram bins"
    )


def analysis_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    kw: dict[str, Any] = {
        "compat": args.compat,
        "linked_only": args.linked_only,
        "step": args.step,
        "rank_by": args.rank_by,
    }
    if args.step_pattern:
        kw["step_pattern"] = args.step_pattern
    for name in OPTION_FLAGS:
        val = getattr(args, name, None)
        if val is not None:
            kw[name] = val
    if kw.get("launch_rows") == "all":
        kw["launch_rows"] = None  # every linked GPU event
    return kw


#: The settings whose flags may be left out (dest == Options field): given, they are passed on;
#: left out, Options' default holds. Every field of Options but those always passed and ``extra``.
OPTION_FLAGS: list[str] = [
    f.name
    for f in fields(Options)
    if f.name not in ("compat", "linked_only", "step", "rank_by", "step_pattern", "extra")
]


def add_output_format(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--fmt",
        dest="fmt",
        choices=OUTPUT_FORMATS,
        default="table",
        help="table (terminal, default), markdown, or a machine format: csv or json (exactly one "
        "document on stdout, notes on stderr)",
    )


#: Rows a terminal table shows unless --top N or --all says otherwise.
DEFAULT_TOP = 20


def add_rows(p: argparse.ArgumentParser, *aliases: str) -> None:
    """``--top N`` and ``--all``: how many rows the tables show, the same in every command."""
    p.add_argument(
        "--top",
        *aliases,
        dest="top",
        type=whole(1, INT64_MAX),
        default=None,
        metavar="N",
        help=f"show the first N rows of each table (default {DEFAULT_TOP} in the terminal, every row in csv/json)",
    )
    p.add_argument("--all", dest="all_rows", action="store_true", help="show every row")
    p.add_argument(
        "--wide",
        action="store_true",
        help="full names, never shortened, and every column in one block (the table may be wider than the terminal)",
    )


def rows_to_show(args: argparse.Namespace) -> int | None:
    """The row limit of ``--top``/``--all`` (``None``: every row)."""
    if getattr(args, "all_rows", False):
        return None
    if args.top is not None:
        if args.top < 1:
            raise UsageError(f"--top {args.top}: give a number of rows >= 1 (or --all)")
        return args.top
    return None if is_machine(args.fmt) else DEFAULT_TOP


def is_machine(fmt: str) -> bool:
    """Whether ``fmt`` is a machine format: stdout then holds exactly one CSV or JSON document."""
    return fmt in ("csv", "json")


def say(text: str, fmt: str) -> None:
    """Print a note: on stdout for the human formats (escaped as Markdown in a Markdown document),
    on stderr for the machine formats."""
    shown = markdown_text(text) if fmt == "markdown" else printable(text, keep_newlines=True)
    print(shown, file=sys.stderr if is_machine(fmt) else sys.stdout)


def json_text(doc: object) -> str:
    """One JSON document as :func:`print_json` prints it (without the final newline)."""
    return json.dumps(doc, indent=1, ensure_ascii=False, default=str)


def print_json(doc: object) -> None:
    """One JSON document on stdout."""
    print(json_text(doc))


@contextmanager
def reading(path: str) -> Iterator[None]:
    """Decoding failures that escape a reader become a one-line :class:`InputError` naming ``path``.

    The quick views (``tree``, ``ops``) read one trace in-process, without the engine that
    records such failures per input.
    """
    from ..ingest.cache import UNDECODABLE, undecodable

    try:
        yield
    except RecursionError:
        raise InputError(path, "the JSON is nested too deeply to read") from None
    except UNDECODABLE as exc:  # invalid UTF-8, a damaged SQLite page or deflate stream
        raise InputError(path, undecodable(exc)) from None


def check_out_dir(out: str, cache: str | None) -> None:
    """Say in one line why ``out`` (and its ingest cache) cannot hold results, before any work.

    Raises
    ------
    UsageError
        ``out`` or the cache is a file, ``out/manifest.json`` is a folder, or the nearest
        existing folder is not writable.
    """
    if "://" in out and not out.startswith("file://"):  # an object store: the API checks it can write there
        return
    if os.path.exists(out) and not os.path.isdir(out):
        raise UsageError(f"-o {out}: exists and is not a directory")
    manifest = os.path.join(out, "manifest.json")
    if os.path.isdir(manifest):
        raise UsageError(f"{manifest} is a directory, not a results manifest; remove it or choose another -o")
    cache_dir = cache or os.path.join(out, "cache")
    if os.path.exists(cache_dir) and not os.path.isdir(cache_dir):
        raise UsageError(
            f"{cache_dir}: exists and is not a directory (the ingest cache); remove it or pass --cache DIR"
        )
    for target in (out, cache_dir):
        base = os.path.abspath(target)
        while not os.path.exists(base):
            parent = os.path.dirname(base)
            if parent == base:
                break
            base = parent
        if not os.path.isdir(base):
            raise UsageError(f"cannot create {target}: {base} is not a directory")
        if not os.access(base, os.W_OK | os.X_OK):
            raise UsageError(f"cannot write {target}: {base} is not writable")


def id_list(values: Any) -> str:
    """Sorted ids as ranges: ``[0, 1, 2, 5, 7, 8]`` → ``0-2, 5, 7-8``.

    Examples
    --------
    >>> id_list([5, 0, 1, 2, 8, 7]), id_list([])
    ('0-2, 5, 7-8', 'none')
    """
    ids = sorted({int(v) for v in values})
    if not ids:
        return "none"
    out, start, prev = [], ids[0], ids[0]
    for v in ids[1:] + [None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ", ".join(out)


def select_rank(df: Any, rank: int, where: str) -> Any:
    """The rows of ``rank``; a :class:`UsageError` listing the ranks there are when it has none."""
    if "rank" not in df.columns:
        raise UsageError(f"--rank: {where} has no rank column (it is across ranks)")
    sel = df.loc[df["rank"].to_numpy() == rank]
    if not len(sel):
        raise UsageError(f"no rank {rank} in {where}; ranks: {id_list(df['rank'].to_numpy())}")
    return sel


# -- writing ---------------------------------------------------------------------------------
def write_output(path: str, write: Callable[[str], None]) -> None:
    """Write an output file atomically (:func:`dtrace.core.fileio.atomic_write`): ``write(tmp)`` fills a
    temporary file beside ``path``, which is then renamed into place. Only a regular file (or a
    new one) is replaced that way: a symbolic link, a FIFO or a device (``-o /dev/stdout``,
    ``-o /dev/null``) is written through once the content is whole, and stays what it is.

    Raises
    ------
    UsageError
        The folder does not exist, or ``path`` is a folder.
    OutputError
        The file cannot be written (disk full, read-only, permission); nothing is left behind.
    """
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"cannot write {path}: directory {folder} does not exist")
    if os.path.isdir(path):
        raise UsageError(f"cannot write {path}: it is a directory")
    try:
        atomic_write(path, write, prefix=".dtrace-", through=True)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None


def _write_file(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)


def write_text(path: str, text: str, *, terminal: bool = False) -> None:
    """Write ``text`` to ``path`` atomically (UTF-8, newlines as given). ``terminal``: a text
    report meant to be read with ``cat``/``less``, escaped as the terminal is (control characters
    shown, :func:`~dtrace.render.escape.printable`), so a name in it cannot drive the terminal."""
    if terminal:
        text = printable(text, keep_newlines=True)
    write_output(path, lambda tmp: _write_file(tmp, text))


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    write_output(path, write)


def write_parquet(df: Any, path: str) -> None:
    """Write a DataFrame to ``path`` as Parquet (zstd) atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    write_output(
        path, lambda tmp: pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp, compression="zstd")
    )
