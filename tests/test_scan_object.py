"""The compiled scanner (dtrace/readers/_scan.c) as a Python object (issue 31, item 15).

Whatever Python does with a ``Scanner`` it must never crash nor corrupt the interned strings:
an object made by ``__new__`` alone scans, ``__init__`` runs once, the ``strings`` and ``codes``
views only intern (with the scanner's own code) and every code read back is checked, the type
takes part in garbage collection, sizes are checked for overflow, interning stays consistent
when an allocation fails, pickling and wrong argument types raise ``TypeError``, and names
crafted to collide (under the old fixed hash) intern in linear time. The cases that crashed
the old extension run in a subprocess, so they fail here instead of killing pytest.

Skipped where the extension is not built, unless ``DTRACE_REQUIRE_SCANNER=1`` (then they fail).
"""

from __future__ import annotations

import copy
import gc
import os
import pickle
import subprocess
import sys
import textwrap
import time
import weakref

import numpy as np
import pytest

from dtrace.readers import _scanned

REQUIRED = os.environ.get("DTRACE_REQUIRE_SCANNER", "") not in ("", "0")
pytestmark = pytest.mark.skipif(not _scanned.AVAILABLE and not REQUIRED, reason="the compiled scanner is not built")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def scan():
    """The extension module (an ImportError fails the test where DTRACE_REQUIRE_SCANNER is set)."""
    from dtrace.readers import _scan

    return _scan


def _doc(names, cat="c"):
    events = ['{"ph": "X", "name": "%s", "cat": "%s", "pid": 0, "tid": 1, "ts": 1, "dur": 1}' % (n, cat) for n in names]
    return ("[" + ", ".join(events) + "]").encode()


def _names(s, got):
    """The names of a scan's events, read back through the scanner's strings."""
    return [s.strings[c] for c in np.frombuffer(got[2], np.int32).tolist()]


def _consistent(s):
    strings, codes = s.strings.copy(), s.codes.copy()
    return len(strings) == len(codes) and all(codes[t] == i for i, t in enumerate(strings))


def _isolated(code):
    """Run ``code`` in a fresh interpreter (a crash is a failure here, not the end of pytest)."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    why = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), f"{why}\n{proc.stdout}\n{proc.stderr}"


def test_an_object_made_by_new_alone_scans():
    """The old type made its state in __init__ only: ``Scanner.__new__(Scanner).scan(...)`` crashed."""
    _isolated(
        """
        import numpy as np
        from dtrace.readers._scan import Scanner

        s = Scanner.__new__(Scanner)
        got = s.scan(b'[{"ph": "X", "cat": "c", "name": "a"}, {"ph": "X", "cat": "c", "name": "b"}]')
        assert got is not None and got[0] == 2
        assert [s.strings[c] for c in np.frombuffer(got[2], np.int32)] == ["a", "b"]
        assert s.intern("x") == len(s.strings) - 1 and s.codes["x"] == s.intern("x")
        s.__init__()  # the first __init__ of such an object runs (and keeps what it holds)
        assert list(s.strings) == ["c", "a", "b", "x"]
        print("OK")
        """
    )


def test_init_runs_once(scan):
    """A second __init__ swapped the containers but kept the hash table (codes then pointed at
    nothing); now it raises and the scanner keeps every string and code."""
    s = scan.Scanner()
    got = s.scan(_doc(["a", "b"]))
    before = s.strings.copy()
    with pytest.raises(RuntimeError, match="cannot be re-initialised"):
        s.__init__()
    assert s.strings.copy() == before and _consistent(s)
    got = s.scan(_doc(["b", "new", "a"]))
    assert _names(s, got) == ["b", "new", "a"] and s.codes["new"] == len(before)
    with pytest.raises(TypeError):
        scan.Scanner(1)
    with pytest.raises(TypeError):
        scan.Scanner(strings=[])


def test_views_only_intern_with_the_scanners_codes(scan):
    """``strings`` and ``codes`` were the live list and dict: ``s.codes[name] = 10**12`` made the
    scanner give that name the code -727379968. They are views now: reads as a list and a dict,
    and the only writes intern a string with the code the scanner gives it."""
    s = scan.Scanner()
    s.scan(_doc(["a", "b"]))
    with pytest.raises(ValueError):
        s.codes["x"] = 10**12
    with pytest.raises(ValueError):
        s.codes["x"] = 0  # "a"'s code: two strings cannot share one
    with pytest.raises(TypeError):
        s.codes["x"] = "3"
    with pytest.raises(TypeError):
        s.codes[3] = 3
    with pytest.raises(TypeError):
        del s.codes["a"]
    with pytest.raises(TypeError):
        s.strings[0] = "z"
    with pytest.raises(TypeError):
        del s.strings[0]
    for name in ("clear", "pop", "extend", "insert", "remove", "update", "setdefault", "popitem"):
        assert not hasattr(s.strings, name) and not hasattr(s.codes, name), name
    with pytest.raises(TypeError):
        s.strings.append(5)
    with pytest.raises(TypeError):
        s.intern(b"x")
    assert "x" not in s.codes and _consistent(s)
    # kineto's idiom: the code is the number of strings, then the string is appended
    code = s.codes["x"] = len(s.strings)
    s.strings.append("x")
    s.strings.append("x")  # already interned: nothing
    assert s.intern("x") == code == 3 and len(s.strings) == 4 and s.strings[code] == "x"
    got = s.scan(_doc(["x", "a", "y"]))
    assert _names(s, got) == ["x", "a", "y"] and s.codes["y"] == 4 and _consistent(s)

    class Str(str):
        def __hash__(self):
            return 0

        def __eq__(self, other):
            return True

    assert type(s.strings[s.intern(Str("w"))]) is str and s.codes["w"] == 5  # a subclass is copied to a str
    # reads: as a list and a dict; the copies are detached
    assert s.strings == ["a", "c", "b", "x", "y", "w"] and s.strings[-1] == "w" and s.strings[1:3] == ["c", "b"]
    assert list(s.strings) == s.strings.copy() and "y" in s.strings and len(s.strings) == 6
    assert s.codes == {"a": 0, "c": 1, "b": 2, "x": 3, "y": 4, "w": 5} and s.codes.get("q") is None
    assert s.codes.get("q", -1) == -1 and s.codes["c"] == 1 and "c" in s.codes and len(s.codes) == 6
    assert list(s.codes.items()) == list(s.codes.copy().items()) and list(s.codes) == list(s.codes.keys())
    with pytest.raises(IndexError):
        s.strings[6]
    with pytest.raises(IndexError):
        s.strings[2**70]
    with pytest.raises(KeyError):
        s.codes["q"]
    mine = s.codes.copy()
    mine["q"] = 10**12
    listed = s.strings.copy()
    listed.append("q")
    assert "q" not in s.codes and "q" not in s.strings and _consistent(s)
    assert repr(s.strings).startswith("ScannerStrings([") and repr(s.codes).startswith("ScannerCodes({")


def test_codes_read_back_are_checked(scan):
    """Behind the views (the dict is reachable through gc.get_referents) a planted code is never
    trusted: an int beyond int64 or out of range, or not an int, raises instead of being
    truncated by an unchecked PyLong_AsLong; the scanner stays usable."""
    s = scan.Scanner()
    s.scan(_doc(["a"]))
    found = [r for r in gc.get_referents(s) if isinstance(r, dict)]
    table = found[0] if found else s.codes  # the old type: the live dict itself
    for planted, error in ((10**12, ValueError), (10**30, OverflowError), (-1, ValueError), ("1", TypeError)):
        table["p"] = planted
        with pytest.raises(error):
            s.scan(_doc(["a", "p"]))
        del table["p"]
    got = s.scan(_doc(["p", "a"]))
    assert _names(s, got) == ["p", "a"] and _consistent(s)


def test_scanner_takes_part_in_garbage_collection(scan):
    """The old type was not tracked: a cycle through a Scanner was never collected."""
    s = scan.Scanner()
    assert gc.is_tracked(s) and gc.is_tracked(s.strings) and gc.is_tracked(s.codes)
    referents = gc.get_referents(s)
    assert sorted(type(r).__name__ for r in referents) == ["dict", "list"]
    assert gc.get_referents(s.strings) == [s]

    class Holder:
        pass

    held = Holder()
    held.scanner, held.view = s, s.codes
    strings = next(r for r in referents if isinstance(r, list))
    strings.append(held)  # a cycle: scanner -> list -> holder -> scanner (and a view)
    gone = weakref.ref(held)
    del s, held, strings, referents
    gc.collect()
    assert gone() is None


def test_first_codes_and_join_spans_check_their_sizes():
    """``first_codes`` sized its table n * 4 unchecked: n = 2**62 wrapped to 0 bytes and crashed.
    Its table is sized by the largest code present now, every size checked; both functions
    read unaligned buffers and refuse malformed ones with ValueError."""
    _isolated(
        """
        import numpy as np
        from dtrace.readers._scan import first_codes, join_spans

        codes = np.array([3, -1, 0, 3, 1], np.int32)
        want = ([0, -1, 1, 0, 2], [3, 0, 1])
        unaligned = memoryview(b"\\0" + codes.tobytes())[1:]
        for n in (2**62, 2**63 - 1, 4, 2**31):
            for buf in (codes.tobytes(), unaligned):
                local, dictionary = first_codes(buf, n)
                got = (np.frombuffer(local, np.int32).tolist(), np.frombuffer(dictionary, np.int32).tolist())
                assert got == want, (n, got)
        for n, error in ((-1, ValueError), (3, ValueError), (2**63, OverflowError), (2**64, OverflowError)):
            try:
                first_codes(codes.tobytes(), n)
            except error:
                pass
            else:
                raise AssertionError(n)
        for bad in (b"\\0" * 5, b"\\xff" * 4 + b"\\0"):
            try:
                first_codes(bad, 10)
            except ValueError:
                pass
            else:
                raise AssertionError(bad)
        assert first_codes(b"", 0) == (bytearray(), bytearray())
        text = b"abcdef"
        spans = np.array([[1, 3], [4, 6]], np.int64).tobytes()
        assert join_spans(text, spans, 44) == b"bc,ef,"
        assert join_spans(text, memoryview(b"\\0" + spans)[1:], 44) == b"bc,ef,"
        outside = [np.array([pair], np.int64).tobytes() for pair in ([4, 7], [-1, 2], [3, 2])]
        for args in [(text, spans[:-1], 44), (text, spans, 300)] + [(text, o, 44) for o in outside]:
            try:
                join_spans(*args)
            except ValueError:
                pass
            else:
                raise AssertionError(args)
        print("OK")
        """
    )


def test_pickling_copying_and_subclassing_raise_type_error(scan):
    s = scan.Scanner()
    s.scan(_doc(["a"]))
    for obj in (s, s.strings, s.codes):
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            with pytest.raises(TypeError):
                pickle.dumps(obj, protocol)
        with pytest.raises(TypeError):
            copy.copy(obj)
        with pytest.raises(TypeError):
            copy.deepcopy(obj)
    with pytest.raises(TypeError):
        type("Sub", (scan.Scanner,), {})
    with pytest.raises(TypeError):
        type(s.strings)()


def test_wrong_argument_types_raise_type_error(scan):
    s = scan.Scanner()
    for bad in (None, 1, "[]", [], object()):
        with pytest.raises(TypeError):
            s.scan(bad)
    with pytest.raises(TypeError):
        s.scan()
    with pytest.raises(TypeError):
        s.scan(b"[]", b"[]")
    with pytest.raises(TypeError):
        scan.Scanner.scan(object(), b"[]")
    with pytest.raises((TypeError, BufferError)):
        s.scan(memoryview(b"[1, 2]")[::2])  # not contiguous
    for args in ((None, 1), (b"", "1"), (b"", 1, 2), ()):
        with pytest.raises(TypeError):
            scan.first_codes(*args)
    for args in (("x", b"", 1), (b"", b"", "x"), (b"", b"")):
        with pytest.raises(TypeError):
            scan.join_spans(*args)
    with pytest.raises(TypeError):
        s._hash("x")
    # every bytes-like reads the same
    doc = _doc(["a", "b", "a"])
    want = [bytes(c) for c in s.scan(doc)[1:]]
    for like in (bytearray(doc), memoryview(doc), np.frombuffer(doc, np.uint8)):
        assert [bytes(c) for c in s.scan(like)[1:]] == want
    assert s.scan(b"") is None and s.scan(b"[") is None and s.scan(b"[]")[0] == 0


def test_a_scan_re_entered_raises():
    """Python code run mid-scan (here a planted key's __eq__) that scans with the same Scanner
    reset its buffers under the running scan; now the inner scan raises RuntimeError."""
    _isolated(
        """
        import gc
        from dtrace.readers._scan import Scanner

        s = Scanner()
        found = [r for r in gc.get_referents(s) if isinstance(r, dict)]
        table = found[0] if found else s.codes
        inner = []

        class Key:
            def __hash__(self):
                return hash("evil")

            def __eq__(self, other):
                try:
                    inner.append(s.scan(b'[{"ph": "X", "name": "other"}]'))
                except RuntimeError as exc:
                    inner.append(exc)
                return False

        table[Key()] = 0
        got = s.scan(b'[{"ph": "X", "cat": "c", "name": "evil"}, {"ph": "X", "cat": "c", "name": "b"}]')
        assert inner and all(isinstance(x, RuntimeError) for x in inner), inner
        assert got is not None and got[0] == 2 and len(got[2]) == 8
        print("OK")
        """
    )


def test_interning_is_atomic_under_memory_errors():
    """A MemoryError between entering a new string in the dict and appending it to the list left
    a code with no string, which the next new string got too. Each allocation fails in turn
    here: whatever fails, the strings and codes stay one to one, and a scan afterwards gives
    every name its own code."""
    pytest.importorskip("_testcapi")
    _isolated(
        """
        import _testcapi
        import numpy as np
        from dtrace.readers._scan import Scanner

        names = ["name%03d" % i for i in range(40)]
        doc = ("[" + ", ".join('{"ph": "X", "cat": "c", "name": "%s"}' % n for n in names) + "]").encode()
        failed = 0
        for start in range(1, 300):
            s = Scanner()
            s.scan(b'[{"ph": "X", "name": "first"}]')
            try:
                _testcapi.set_nomemory(start, start + 1)
                try:
                    s.scan(doc)
                finally:
                    _testcapi.remove_mem_hooks()
            except MemoryError:
                failed += 1
            strings, codes = s.strings.copy(), s.codes.copy()
            assert len(strings) == len(codes) and all(codes[t] == i for i, t in enumerate(strings)), start
            got = s.scan(doc)
            assert [s.strings[c] for c in np.frombuffer(got[2], np.int32).tolist()] == names, start
        assert failed > 20, failed
        print("OK")
        """
    )


# -- interning: keyed hash ----------------------------------------------------------------------
_M64 = (1 << 64) - 1
_K1, _C0 = 0xFF51AFD7ED558CCD, 0x9E3779B97F4A7C15
_PRINTABLE = np.array([b for b in range(0x20, 0x7F) if b not in (0x22, 0x5C)], np.uint8)  # no '"', no '\\'


def _old_hash(b: bytes) -> int:
    """The interning hash of _scan.c before issue 31 (fixed constants, no key)."""
    n, i = len(b), 0
    h = _C0 ^ n
    while i + 8 <= n:
        h = ((h ^ int.from_bytes(b[i : i + 8], "little")) * _K1) & _M64
        h ^= h >> 32
        i += 8
    for c in b[i:]:
        h = ((h ^ c) * 0x100000001B3) & _M64
    h ^= h >> 29
    h = (h * 0xC4CEB9FE1A85EC53) & _M64
    return h ^ (h >> 32)


def _colliding_names(count):
    """Distinct printable 16-byte names with one and the same old hash: "name_" and 3 bytes,
    then 8 bytes that cancel the state the first 8 left (so every name ends in one state)."""
    ok = np.zeros(256, bool)
    ok[_PRINTABLE] = True
    tails = np.array(np.meshgrid(_PRINTABLE, _PRINTABLE, _PRINTABLE, indexing="ij")).reshape(3, -1).T
    heads = np.concatenate([np.frombuffer(b"name_", np.uint8)[None].repeat(len(tails), 0), tails], axis=1)
    v1 = np.ascontiguousarray(heads).view("<u8").ravel()
    h = (v1 ^ np.uint64(_C0 ^ 16)) * np.uint64(_K1)
    h ^= h >> np.uint64(32)
    v2 = h ^ h[0] ^ np.frombuffer(b"AAAAAAAA", "<u8")
    keep = ok[v2.view(np.uint8)].reshape(-1, 8).all(axis=1)
    names = [(a.tobytes() + b.tobytes()).decode() for a, b in zip(v1[keep][:count], v2[keep][:count])]
    assert len(names) == count and len({_old_hash(n.encode()) for n in names}) == 1
    return names


def test_interning_hash_is_keyed_per_scanner(scan):
    """The old hash had fixed constants: names crafted offline all fell in one chain. The keys
    are drawn per Scanner (os.urandom): two scanners hash alike only by chance, and the
    crafted names spread over the table."""
    a, b = scan.Scanner(), scan.Scanner()
    assert a._hash(b"aten::mm") == a._hash(bytearray(b"aten::mm"))
    assert a._hash(b"aten::mm") != b._hash(b"aten::mm") and a._hash(b"") != b._hash(b"")
    names = _colliding_names(1500)
    buckets = {a._hash(n.encode()) & 1023 for n in names}
    assert len(buckets) > 700  # 1,500 random keys fill ~790 of 1,024 buckets (the old hash: 1)


def test_names_crafted_to_collide_intern_in_linear_time(scan):
    """1,500 names of one old hash, each 4 times: the old table probed a chain of all of them
    for each (about 10x the time of as many random names); now the same time, loosely."""
    crafted = _colliding_names(1500)
    rng = np.random.default_rng(1)
    plain = [_PRINTABLE[rng.integers(0, len(_PRINTABLE), 16)].tobytes().decode() for _ in range(1500)]

    def seconds(names):
        doc, best = _doc(names * 4), float("inf")
        for _ in range(5):
            s = scan.Scanner()
            t0 = time.perf_counter()
            got = s.scan(doc)
            best = min(best, time.perf_counter() - t0)
            assert got is not None and len(s.strings) == len(set(names)) + 1
        return best

    t_plain, t_crafted = seconds(plain), seconds(crafted)
    assert t_crafted < 3 * t_plain + 0.003, (t_crafted, t_plain)
