"""The optional compiled scanner of Kineto events (dtrace/readers/_scan.c).

Everything else is in pyproject.toml. The extension is optional: without a C compiler the
install still succeeds and the Kineto reader runs its pure-Python path (same tables).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("dtrace.readers._scan", ["dtrace/readers/_scan.c"], optional=True)])
