"""Entry point: ``dtrace COMMAND ...`` (also ``python -m dtrace``)."""

from __future__ import annotations

import argparse
import atexit
import os
import sys
import threading
from types import ModuleType
from typing import NoReturn

from .._version import __version__
from ..core.memory import tune_malloc
from ..errors import DtraceError
from ..render.escape import printable


def _commands() -> list[ModuleType]:
    from . import (
        analyze,
        bounds,  # dtrace bounds
        host,  # dtrace launches, dtrace memory
        quick,  # dtrace kernels, dtrace gaps
        report,  # dtrace report, dtrace compare, dtrace diff
        show,
    )
    from . import nsys as nsys_cmd  # dtrace nsys-stats
    from . import perf as perf_cmd  # dtrace perf
    from . import perf_report as perf_report_cmd  # dtrace perf-report
    from . import synth as synth_cmd  # dtrace synth
    from . import timeline as timeline_cmd  # dtrace timeline, dtrace whatif
    from . import tree as tree_cmd  # dtrace tree, dtrace ops, dtrace sequences

    return [
        analyze,
        show,
        tree_cmd,
        perf_cmd,
        perf_report_cmd,
        quick,
        host,
        report,
        nsys_cmd,
        synth_cmd,
        timeline_cmd,
        bounds,
    ]


class Parser(argparse.ArgumentParser):
    """argparse with dtrace's one-line errors: ``dtrace COMMAND: error: ...`` and exit code 2
    (argparse prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {printable(message)} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="dtrace", description="Analyse GPU profiler traces of every rank at once.")
    p.add_argument("--version", action="version", version=f"dtrace {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for mod in _commands():
        mod.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error already printed in one line
        return exc.code if isinstance(exc.code, int) else 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except DtraceError as exc:  # usage, input, results and output errors: one line, exit code 2
        error(args.command, exc)
        return 2
    except KeyboardInterrupt:
        print("dtrace: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:  # a file system error no layer below turned into a DtraceError
        where = f"{exc.filename}: " if exc.filename else ""
        error(args.command, f"{where}{exc.strerror or exc}")
        return 2


def entry() -> NoReturn:
    """The ``dtrace`` command (and ``python -m dtrace``): :func:`main`, then :func:`leave`. The
    command's process runs a small job's tasks itself: it allocates as dtrace's workers do
    (:func:`dtrace.core.memory.tune_malloc`)."""
    tune_malloc()
    leave(main())


def leave(code: int) -> NoReturn:
    """End the process with ``code`` once everything it promised is done, without the interpreter's
    teardown.

    The results are written and closed by then; what a normal exit would add is deallocating every
    object and module one by one (~1,500 modules: pandas, pyarrow, dask), 0.2-0.3 s of a run that
    takes a few seconds. Before leaving, as a normal exit would: the other threads that are not
    daemons end, the ``atexit`` handlers run (multiprocessing's finalizers, coverage's data, Dask's
    clean-up), and the standard streams are flushed.
    """
    for t in threading.enumerate():
        if t is not threading.current_thread() and not t.daemon:
            t.join()
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
    if run_exit_handlers is None:  # pragma: no cover - every CPython has it; elsewhere exit as usual
        sys.exit(code)
    run_exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (dtrace ... | head) or a closed stream: nothing to flush to
            pass
    os._exit(code)


def error(command: str, message: object) -> None:
    """Print ``dtrace COMMAND: error: MESSAGE`` on stderr as one line (control characters escaped)."""
    print(f"dtrace {command}: error: {printable(message)}", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
