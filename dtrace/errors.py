"""Exceptions. Every error names the input it is about and says what is wrong in one line."""

from __future__ import annotations

import os


class DtraceError(Exception):
    """Base class of every error dtrace raises on purpose."""


class UsageError(DtraceError):
    """Bad arguments or options (CLI exit code 2)."""


class InputError(DtraceError):
    """One input cannot be analysed. The message names the file and the problem.

    Parameters
    ----------
    path
        The input file.
    problem
        What is wrong, as one short sentence without the file name.
    """

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        self.path = os.fspath(path)
        self.problem = " ".join(str(problem).split())  # always one line
        super().__init__(f"{self.path}: {self.problem}")

    def __reduce__(self) -> tuple[type[InputError], tuple[str, str]]:  # picklable across Dask workers
        return (type(self), (self.path, self.problem))


class NoGPUActivity(InputError):
    """The trace is valid but holds no GPU events."""


class OwnOutput(InputError):
    """The input is one of dtrace's own outputs (a results manifest, a cache record, stored
    results, a timeline export): skipped with a note, never analysed as a trace."""


class ResultsError(DtraceError):
    """A results directory is missing, incomplete or from an incompatible version."""


class NotRegularFile(InputError):
    """The input is not a regular file (a FIFO, a device, a socket, a folder that cannot be
    listed): refused without reading it, so it can never block the run."""


class InputTooLarge(InputError):
    """The input's content, or one event or string in it, is larger than its size limit."""


class ImplausibleTimes(InputError):
    """Every GPU event of the input has an implausible timestamp or duration."""


class RankError(InputError):
    """The input's rank is invalid or claimed by another input."""


class OutputError(DtraceError):
    """An output file (a report, a CSV, a results table) cannot be written: disk full,
    read-only file system, no permission, a folder where a file belongs."""
