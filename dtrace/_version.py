"""The one place the dtrace version is written (pyproject reads it from here)."""

__version__ = "0.1.0"
