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
