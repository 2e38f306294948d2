"""Declared dtypes of the results tables, the one function that casts a table to them, and
the one that makes an empty table of declared columns.

Every ``*_ns`` column is an integer number of nanoseconds (int64); a value that can be missing
(unknown message bytes, a collective without ``seq``, a node without a collective) is a pandas
nullable ``Int64`` holding ``NA``, never a sentinel such as -1. Floats computed for an integer
column (a mean, a median, a standard deviation) are rounded half to even, once, here.
"""

from __future__ import annotations

import functools
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd
import pyarrow as pa

I64, I32, STR, F64, BOOL = "int64", "int32", "object", "float64", "bool"
NI64 = "Int64"
"""A nullable int64 (pandas ``Int64``): ``NA`` where the value is missing (unknown bytes, no seq)."""
INTS = (NI64, I64, I32, "int16", "int8")
DTYPES = (*INTS, F64, BOOL, STR)
"""Every dtype a table may declare (as these strings; ``object`` means text)."""


def has_dtype(col: pd.Series, want: str) -> bool:
    """Whether ``col`` already has the declared dtype (``object`` means text: any string dtype)."""
    return dtype_is(col.dtype, want)


def dtype_is(dtype: Any, want: str) -> bool:
    """Whether a column of ``dtype`` has the declared dtype ``want`` (see :func:`has_dtype`)."""
    if want == STR:
        return (isinstance(dtype, np.dtype) and dtype.kind == "O") or pd.api.types.is_string_dtype(dtype)
    if want == NI64:  # stored with its nulls as int64 + validity; a column without any may read back as int64
        return str(dtype) == NI64 or dtype == np.int64
    return str(dtype) == want


def _int_range(want: str) -> tuple[int, int]:
    """The smallest and largest value of the integer dtype ``want`` (``Int64``: int64's)."""
    info = np.iinfo(np.int64 if want == NI64 else np.dtype(want))
    return int(info.min), int(info.max)


def _from_ints(col: pd.Series, want: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    """An integer column's values as int64 and its missing mask; a value beyond ``want``'s range
    is an error."""
    lo, hi = _int_range(want)
    missing = col.isna().to_numpy()
    ints = col.to_numpy(np.int64, na_value=0)
    bad = np.flatnonzero(((ints < lo) | (ints > hi)) & ~missing)
    if len(bad):
        raise TypeError(f"column {name!r} is declared {want} but holds {int(ints[bad[0]])}, beyond its range")
    return ints, missing


def _from_floats(col: pd.Series, want: str, name: str, strict: bool) -> tuple[np.ndarray, np.ndarray]:
    """A float column's values rounded half to even as int64 and its missing mask; a fraction
    (``strict``) or a value beyond ``want``'s range is an error."""
    lo, hi = _int_range(want)
    vals = col.to_numpy(np.float64, na_value=np.nan)
    missing = np.isnan(vals)
    whole = np.rint(np.where(missing, 0.0, vals))
    if strict:
        bad = np.flatnonzero((whole != np.where(missing, 0.0, vals)) | np.isinf(vals))
        if len(bad):
            raise TypeError(
                f"column {name!r} is declared {want} but holds {vals[bad[0]]!r} (not a whole number): "
                "round or convert it in the analysis"
            )
    # int64's largest value is not a float: 2**63 (the first float above it) is out of range
    bad = np.flatnonzero(~((whole >= float(lo)) & (whole < float(hi) + 1.0)))
    if len(bad):
        raise TypeError(f"column {name!r} is declared {want} but holds {float(vals[bad[0]])!r}, beyond its range")
    return whole.astype(np.int64), missing


def as_declared(col: pd.Series, want: str, name: str = "", strict: bool = False) -> Any:
    """The values of ``col`` in the declared dtype ``want`` (an array for the DataFrame).

    Floats declared as integers are rounded half to even (``np.rint``) from the float as it is
    (``strict``: a float that is not a whole number is an error instead); NaN becomes ``NA`` in
    a nullable ``Int64`` column and is an error in a plain integer one.

    Examples
    --------
    >>> as_declared(pd.Series([2.5, 3.5, np.nan]), "Int64").tolist()
    [2, 4, <NA>]
    >>> as_declared(pd.Series([0.5, 1.5]), "int64").tolist()
    [0, 2]
    >>> as_declared(pd.Series([2**70], dtype=object), "int64")
    Traceback (most recent call last):
    TypeError: column '' is declared int64 but holds 1.1805916207174113e+21, beyond its range
    """
    if want == STR:
        return col.astype(object).to_numpy() if len(col) else np.array([], object)
    if want not in INTS:
        return col.to_numpy(want, na_value=np.nan) if want == F64 else col.to_numpy().astype(want)
    if col.dtype == object:
        col = pd.to_numeric(col)
    if str(col.dtype).lower().startswith("uint"):  # beyond int64 it would wrap: through floats
        col = col.astype("Float64" if col.isna().any() else np.float64)
    if pd.api.types.is_integer_dtype(col.dtype) or pd.api.types.is_bool_dtype(col.dtype):
        ints, missing = _from_ints(col, want, name)
    else:
        ints, missing = _from_floats(col, want, name, strict)
    if want == NI64:
        return pd.arrays.IntegerArray(ints, missing)
    if missing.any():
        raise TypeError(f"column {name!r} has missing values but is declared {want}")
    return ints.astype(want)


def empty_frame(columns: Mapping[str, Any] | Iterable[str], dtype: Any = object) -> pd.DataFrame:
    """A table without rows whose columns have the declared dtypes (a name → dtype mapping), or
    ``dtype`` for every name of a plain list.

    Examples
    --------
    >>> empty_frame({"rank": "int32", "name": object}).dtypes.astype(str).tolist()
    ['int32', 'object']
    >>> list(empty_frame(["a", "b"], "int64").columns)
    ['a', 'b']
    """
    cols = dict(columns) if isinstance(columns, Mapping) else dict.fromkeys(columns, dtype)
    key = tuple((c, str(t) if isinstance(t, (str, np.dtype)) else t) for c, t in cols.items())
    try:
        return _empty(key).copy()
    except TypeError:  # a dtype that cannot key a cache: made anew
        return _empty.__wrapped__(key)


@functools.lru_cache(maxsize=512)
def _empty(key: tuple[tuple[str, Any], ...]) -> pd.DataFrame:
    """The empty table of these (name, dtype) pairs (cached: tables are declared once, made often)."""
    return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in key}, columns=[c for c, _ in key])


def conform(df: pd.DataFrame, columns: Mapping[str, Any], table: str, strict: bool = False) -> pd.DataFrame:
    """Check that ``df`` is a DataFrame with the declared columns (extra ones allowed) and cast
    their dtypes (:func:`as_declared`: floats declared as integers are rounded half to even, or
    with ``strict`` must be whole numbers; NaN is ``NA``).

    Text columns (declared ``object``) may be object or pandas string columns.
    """
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"table {table!r}: the analysis returned {type(df).__name__}, not a pandas DataFrame")
    columns = {c: t if isinstance(t, str) else str(np.dtype(t)) for c, t in columns.items()}  # object -> "object"
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise TypeError(f"table {table!r} lacks its declared columns {missing}")
    dtypes = dict(zip(df.columns, df.dtypes))  # one lookup per column, not a Series each
    if all(str(dtypes[c]) == want or (want == STR and dtype_is(dtypes[c], want)) for c, want in columns.items()):
        return df
    out = {c: _declared(df[c], dtypes[c], columns.get(c), f"{table}.{c}", strict) for c in df.columns}
    return pd.DataFrame(out, columns=list(df.columns))


def _declared(col: pd.Series, dtype: Any, want: str | None, name: str, strict: bool) -> Any:
    """A column of :func:`conform`'s new frame. A text column that is already a pandas string
    column keeps its array (through NumPy objects it would be inferred back to the same string
    dtype, a conversion of every value); an object one goes through NumPy as before (the frame
    infers its dtype), and a column of no declared dtype too."""
    if want is None:
        return col.to_numpy()
    if want != STR and str(dtype) == want:  # already declared: its array as it is (no range check)
        return col.array
    if want == STR and not (isinstance(dtype, np.dtype) and dtype.kind == "O") and dtype_is(dtype, STR):
        return col.array
    return as_declared(col, want, name, strict)


#: the dtype pandas gives a column of Python strings (``str``: Arrow-backed, NaN for missing)
_TEXT = pd.Series(np.array(["a"], dtype=object)).dtype


def text_column(values: Any, codes: np.ndarray) -> Any:
    """``values[codes]`` (numpy's indexing) as the text column pandas makes of Python strings
    (``str``), built by one Arrow take from the distinct ``values`` (Python strings, or an Arrow
    array of them from :func:`text_values`) instead of one string per row. Values that are not
    all strings come back as objects (``values[codes]``), for pandas to infer as before.

    Examples
    --------
    >>> pd.Series(text_column(np.array(["a", "bc"], dtype=object), np.array([1, 0, 1]))).tolist()
    ['bc', 'a', 'bc']
    """
    vals = values if isinstance(values, pa.Array) else text_values(values)
    codes = np.asarray(codes, np.int64)
    if not isinstance(vals, pa.Array) or not codes.size:  # pandas infers: no rows make an object column
        return np.asarray(vals if not isinstance(vals, pa.Array) else vals.to_pylist(), dtype=object)[codes]
    codes = np.where(codes < 0, codes + len(vals), codes)  # as numpy indexes: -1 is the last value
    return pd.array(vals.take(pa.array(codes)), dtype=_TEXT)


def text_values(values: Any) -> Any:
    """Distinct Python strings as the Arrow array :func:`text_column` takes from (the type pandas
    stores its ``str`` columns in); values that are not all strings stay an object array."""
    obj = np.asarray(values, dtype=object)
    if pd.api.types.infer_dtype(obj, skipna=False) not in ("string", "empty"):
        return obj
    return pa.array(obj, pa.large_string())


def missing_if_negative(values: np.ndarray) -> pd.api.extensions.ExtensionArray:
    """A nullable ``Int64`` array of ``values`` with ``NA`` where a value is negative (the
    readers' -1 for "not stated": seq, bytes, group size, step).

    Examples
    --------
    >>> missing_if_negative(np.array([3, -1, 0])).tolist()
    [3, <NA>, 0]
    """
    v = np.asarray(values, np.int64)
    return pd.arrays.IntegerArray(np.where(v < 0, 0, v), v < 0)
