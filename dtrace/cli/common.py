"""Flags shared by several commands, mapped one to one onto keyword arguments."""

from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from ..constants import OUTPUT_FORMATS
from ..errors import InputError, OutputError, UsageError
from ..fileio import atomic_write
from ..render.escape import printable


def add_analysis_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("analysis")
    g.add_argument(
        "--compat",
        choices=["default", "tracelens"],
        default="default",
        help="reproduce a peer tool's numbers exactly (tracelens: GPUEventAnalyser rules)",
    )
    g.add_argument("--linked-only", action="store_true", help="keep only GPU events linked to a host launch")
    g.add_argument("--step", type=int, default=None, help="keep only this step (iteration) in every table")
    g.add_argument("--step-pattern", default=None, help="regex on annotation names marking a step (group 1 = number)")
    g.add_argument(
        "--rank-by",
        choices=["auto", "order"],
        default="auto",
        help="auto: distributedInfo, then rank<N> in the file name; order: sorted input order",
    )
    g.add_argument("--format", dest="input_format", default=None, help="force an input format (default: detect)")
    g.add_argument(
        "--gpus-per-host",
        type=int,
        default=None,
        help="ranks r // N share a host clock (default 8; "
        "0: one clock per rank) when clock offsets are removed from collectives",
    )
    g.add_argument("--straggler-method", default=None, help="straggler detector: robust (default) or late_start")
    g.add_argument(
        "--gpu-spec",
        metavar="FILE",
        default=None,
        help="GPU peaks (JSON) that override or add to the bundled table for the roofline, e.g. measured "
        "'max achievable' figures (docs/semantics.md, 'Hardware peaks')",
    )
    add_kernel_gap_options(g)


def _us_to_ns(text: str) -> int:
    """A CLI time in µs (float allowed) → integer ns."""
    try:
        return int(round(float(text) * 1000))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of microseconds: {text!r}") from None


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
        type=int,
        default=None,
        help="iterations in the trace for per-iteration figures (default: steps found)",
    )
    g.add_argument(
        "--summary-gpus",
        type=int,
        default=None,
        metavar="N",
        help="GPUs an nsys stats summary CSV covers (per-iteration figures divide by iters x N)",
    )
    g.add_argument(
        "--hist-min",
        dest="hist_min_ns",
        type=_us_to_ns,
        default=None,
        metavar="US",
        help="gap histogram lower bound in µs (default: smallest gap)",
    )
    g.add_argument(
        "--hist-max",
        dest="hist_max_ns",
        type=_us_to_ns,
        default=None,
        metavar="US",
        help="gap histogram upper bound in µs (default: largest gap)",
    )
    g.add_argument("--hist-bins", type=int, default=None, help="gap histogram bins (default 20)")
    g.add_argument("--hist-log", action="store_true", default=None, help="logarithmic gap histogram bins")
    g.add_argument(
        "--kernel-wait-us",
        dest="kernel_wait_ns",
        type=_us_to_ns,
        default=None,
        metavar="US",
        help="gaps launched in time and shorter than this are kernel_wait (default 30 µs)",
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
    return kw


# option names that further commands' flags add (dest == Options field)
OPTION_FLAGS: list[str] = [
    "classmap",
    "classmap_engine",
    "classmap_model",
    "iters",
    "hist_min_ns",
    "hist_max_ns",
    "hist_bins",
    "hist_log",
    "kernel_wait_ns",
    "summary_gpus",
]
OPTION_FLAGS += ["gpus_per_host", "straggler_method"]  # collectives, stragglers
OPTION_FLAGS += ["gpu_spec"]  # the op roofline


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
        type=int,
        default=None,
        metavar="N",
        help=f"show the first N rows of each table (default {DEFAULT_TOP} in the terminal, every row in csv/json)",
    )
    p.add_argument("--all", dest="all_rows", action="store_true", help="show every row")


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
    """Print a note: on stdout for the human formats, on stderr for the machine formats."""
    print(printable(text, keep_newlines=True), file=sys.stderr if is_machine(fmt) else sys.stdout)


def print_json(doc: object) -> None:
    """One JSON document on stdout."""
    print(json.dumps(doc, indent=1, ensure_ascii=False, default=str))


@contextmanager
def reading(path: str) -> Iterator[None]:
    """Decoding failures that escape a reader become a one-line :class:`InputError` naming ``path``.

    The quick views (``tree``, ``ops``) read one trace in-process, without the engine that
    records such failures per input.
    """
    try:
        yield
    except UnicodeDecodeError as exc:
        bad = exc.object[exc.start : exc.start + 1].hex() if isinstance(exc.object, bytes) else "?"
        raise InputError(path, f"not valid UTF-8 text (byte 0x{bad}); is it a trace file?") from None
    except RecursionError:
        raise InputError(path, "the JSON is nested too deeply to read") from None


def check_out_dir(out: str, cache: str | None) -> None:
    """Say in one line why ``out`` (and its ingest cache) cannot hold results, before any work.

    Raises
    ------
    UsageError
        ``out`` or the cache is a file, ``out/manifest.json`` is a folder, or the nearest
        existing folder is not writable.
    """
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
    """Write an output file atomically (:func:`dtrace.fileio.atomic_write`): ``write(tmp)`` fills a
    temporary file beside ``path``, which is then renamed into place.

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
        atomic_write(path, write, prefix=".dtrace-")
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None


def _write_file(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)


def write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (UTF-8, newlines as given)."""
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
