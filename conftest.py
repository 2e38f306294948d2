"""Settings of every pytest run in this repository (tests/ and the doctests of dtrace/)."""

import pytest


def _whole_suite(config: pytest.Config) -> bool:
    """Whether this run is the whole suite (no paths, no -k, -m or --deselect): the README's test
    command, which CI runs."""
    o = config.option
    return (
        config.args_source == pytest.Config.ArgsSource.TESTPATHS
        and not o.keyword
        and not o.markexpr
        and not getattr(o, "deselect", None)
    )


def pytest_configure(config: pytest.Config) -> None:
    """Coverage (pytest-cov, ``--cov=dtrace``: .ci/run gives it in ``PYTEST_ADDOPTS``) is measured,
    reported and held to its floor (``[tool.coverage.report] fail_under``) on whole-suite runs
    only: a run of a few test files would fall below the floor without anything being wrong, and
    pays for tracing."""
    cov = config.pluginmanager.getplugin("_cov")
    if cov is None or _whole_suite(config):
        return
    if cov.cov_controller is not None:
        cov.cov_controller.pause()
    cov._disabled = True  # pytest-cov then neither reports nor checks the floor
    cov.options.no_cov = True  # nor starts in pytest-xdist's workers (which run this hook too)


SLOWEST_FIRST = (
    "tests/test_fuzz.py",
    "tests/test_slurm.py",
    "tests/test_own_analyses_and_events.py",
    "tests/test_cache_trust.py",
    "tests/test_remote.py",
    "tests/test_batch_equivalence.py",
    "tests/test_distributed.py",
    "tests/test_cli_startup.py",
    "tests/test_report.py",
    "tests/test_timeline.py",
    "tests/test_scanner.py",
    "tests/test_examples.py",
)
"""The test files of the longest runs (``--durations=0`` summed per file), started first: the
workers of ``-n auto --dist loadfile`` take files in collection order, so a long file collected
last kept one worker busy while the others had nothing left (measured on 2 cores)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the files of :data:`SLOWEST_FIRST` first, in that order; every file's tests stay
    together and in their own order."""
    first = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    rootdir = config.rootpath

    def key(pair: tuple[int, pytest.Item]) -> tuple[int, int]:
        rel = pair[1].path.relative_to(rootdir).as_posix() if pair[1].path.is_relative_to(rootdir) else ""
        return first.get(rel, len(first)), pair[0]

    items[:] = [item for _, item in sorted(enumerate(items), key=key)]
