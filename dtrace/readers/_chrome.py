"""Chunked, typed decoding of Chrome-trace JSON (``{"traceEvents": [...], ...}``).

Shared by the Kineto and JAX readers. The file is streamed (gunzipped on the fly) in blocks;
each block is cut at an event boundary and the complete events are decoded with msgspec
into the reader's ``Struct`` type, so peak memory is a couple of blocks plus the columns
built so far, never the whole document as Python dicts.

Finding a boundary needs no JSON tokenizer: a candidate cut is a ``}`` followed by ``,`` and
``{`` (whitespace allowed). ``"[" + text[start:cut] + "]"`` decodes as an array only if the cut
really is between two top-level events (a cut inside a string or a nested object leaves the
array unbalanced), so the decoder itself confirms the candidate; a wrong candidate costs one
failed decode and the previous candidate is tried.

No byte is copied on the way: plain files are read straight into one reusable buffer (gzip
content is inflated into it), the brackets are written over the separators in place, and the
decoder reads the buffer through a memoryview. The buffer starts small (small files stay
cheap) and grows to ``block`` bytes as the file turns out large.

A small document (at most :data:`WHOLE_MAX` bytes of content, the common per-rank trace) is
decoded in one call instead: one msgspec pass over the whole text into a ``Struct`` of its
top-level keys, no boundary search, no chunk bookkeeping. Anything that does not decode that
way (a malformed or truncated document) is read again by the chunked path, whose errors say
precisely what is wrong.

Memory and time stay bounded on hostile input. Every byte is examined by C code (``rfind``,
compiled regexes, numpy comparisons for long runs), never by a Python loop per byte.
Whitespace between events, before and after the array and after the document is skipped
without being kept, so it never grows the buffer; the buffer grows past ``block`` only for
one event larger than it, up to ``max_event`` bytes (an event, and so every string in it,
larger than that fails the input with a one-line error), and the JSON before and after the
events array is limited the same way. ``max_size`` limits the whole decompressed content.
"""

from __future__ import annotations

import functools
import os
import re
import zlib
from typing import Any, Generator, Iterator

import msgspec
import numpy as np

from ..core.units import format_size
from ..errors import InputError, InputTooLarge
from ._io import BLOCK, Content, open_regular
from ._scanned import join_spans

_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_WS = b" \t\r\n"
_WS_RUN = re.compile(rb"[ \t\r\n]*")
_REV_SEP = re.compile(rb"\{[ \t\r\n]*(,)[ \t\r\n]*\}")  # a boundary between events, reversed
_TRAIL = re.compile(rb"[ \t\r\n]*(,?)[ \t\r\n]*\Z")  # what may follow an event's '}' at the end
_WINDOW = 1 << 18
_SHORT_WS = 4096  # whitespace runs longer than this are measured with numpy ...
_WS_STEP = 1 << 20  # ... this many bytes at a time
_MAX_TRIES = 64
_FIRST_BLOCK = 1 << 16
MAX_EVENT = 16 << 20
"""Default limit of one event's JSON text (and of the JSON before or after the events array)."""
WHOLE_MAX = 8 << 20
"""Content up to this size is decoded in one call (below :data:`MAX_EVENT`, so no event in it can
be over the event limit)."""

_OPEN, _CLOSE, _COMMA = 0x5B, 0x5D, 0x2C  # '[', ']', ','


def _content_size_hint(path: str) -> int | None:
    """The content size of a file: its size, or for gzip the size its trailer states (ISIZE, the
    content size modulo 2**32); None if unreadable. A hint only: the caller reads one byte more."""
    try:
        with open_regular(path) as f:
            magic = f.read(2)
            if magic != b"\x1f\x8b":
                return os.fstat(f.fileno()).st_size
            f.seek(-4, os.SEEK_END)
            return int.from_bytes(f.read(4), "little")
    except (OSError, InputError):
        return None


@functools.lru_cache(maxsize=8)
def _decoders(
    event_type: Any, meta_type: Any
) -> tuple[msgspec.json.Decoder[list[Any]], msgspec.json.Decoder[Any], msgspec.json.Decoder[Any]]:
    """Decoders of a list of events, of the top-level keys, and of a whole document (the keys
    and ``traceEvents``), built once per event/meta type."""
    doc = msgspec.defstruct(
        f"{meta_type.__name__}Document", [("traceEvents", list[event_type] | None, None)], bases=(meta_type,), gc=False
    )
    return (
        msgspec.json.Decoder(list[event_type]),
        msgspec.json.Decoder(meta_type),
        msgspec.json.Decoder(doc),
    )


def _last_byte(buf: bytearray, lo: int, end: int) -> int | None:
    """The last byte of ``buf[lo:end]`` that is not JSON whitespace (None if there is none),
    looked for in steps from the end (no copy of the text before it).

    Examples
    --------
    >>> _last_byte(bytearray(b"[{} \\n ]"), 1, 6), _last_byte(bytearray(b"[  ]"), 1, 3)
    (125, None)
    """
    step = 256
    while end > lo:
        part = bytes(buf[max(lo, end - step) : end]).rstrip(_WS)
        if part:
            return part[-1]
        end -= step
        step = min(step * 16, _WS_STEP)
    return None


def _problem(exc: Exception) -> str:
    if isinstance(exc, (EOFError,)) or "end-of-stream" in str(exc) or "truncated" in str(exc).lower():
        return "truncated or corrupt gzip stream (the file ended early)"
    if isinstance(exc, (zlib.error, OSError)):
        return f"corrupt gzip stream: {exc}"
    return f"invalid JSON: {exc}"


def skip_ws(buf: bytearray, pos: int, end: int) -> int:
    """The first position in ``buf[pos:end]`` that is not JSON whitespace (``end`` if none).

    Short runs (the usual one or two bytes) are matched by a compiled regex, long ones are
    measured with numpy comparisons on views of the buffer, 1 MiB at a time (2-6 GB/s, no copy).

    Examples
    --------
    >>> skip_ws(bytearray(b"[ \\n {"), 1, 5), skip_ws(bytearray(b" " * 10_000), 0, 10_000)
    (4, 10000)
    """
    stop = min(end, pos + _SHORT_WS)
    run = _WS_RUN.match(buf, pos, stop)
    assert run is not None  # the pattern (a '*' run) also matches the empty string
    i = run.end()
    if i < stop or i == end:
        return i
    while i < end:
        a = np.frombuffer(buf, np.uint8, min(end - i, _WS_STEP), i)
        above = a > 0x20  # every byte but the whitespace and control characters
        k = int(above.argmax())
        if not above[k]:
            k = len(a)
        head = a[:k]
        if (head != 0x20).any():  # not only spaces: tabs and newlines are whitespace, other controls not
            other = (head != 0x20) & (head != 0x0A) & (head != 0x0D) & (head != 0x09)
            if other.any():
                return i + int(other.argmax())
        if k < len(a):
            return i + k
        i += len(a)
    return end


class _Window:
    """The unconsumed content ``buf[lo:hi]`` of a file, in one reusable buffer.

    :meth:`fill` moves the unconsumed bytes to the front and reads more. The buffer grows only
    when the unconsumed bytes fill it (one item larger than the buffer), and never past
    ``limit`` bytes of them: then :class:`InputTooLarge` names ``what`` is too large.
    """

    def __init__(self, content: Content, path: str, block: int, limit: int, first: int = _FIRST_BLOCK) -> None:
        self.content = content
        self.path = path
        self.block = block
        self.limit = limit
        self.buf = bytearray(min(block, first))  # small files never pay for a full block
        self.sized = first != _FIRST_BLOCK  # sized to the whole content: grown only once full
        self.lo = self.hi = 0
        self.offset = 0  # content offset of buf[0]
        self.eof = False

    def fill(self, what: str, start: int = 0) -> None:
        """Read on; ``what`` (the unconsumed text, whose first ``start`` bytes are punctuation)
        names the item in the error when it reaches the limit."""
        buf = self.buf
        if self.lo:  # move the unconsumed tail (usually part of one event) to the front
            n = self.hi - self.lo
            buf[:n] = buf[self.lo : self.hi]
            self.offset += self.lo
            self.lo, self.hi = 0, n
        if self.hi >= self.limit:  # no boundary in ``limit`` bytes
            raise InputTooLarge(
                self.path,
                f"{what} is larger than the limit of {format_size(self.limit)} (at content byte {self.offset + start})",
            )
        full = self.hi == len(buf)
        if full or (len(buf) < self.block and not self.sized):
            # grow: up to the block size as the file turns out large, beyond it only when one item
            # is larger than the buffer. A new buffer, never an in-place resize: a frame still
            # holding a view of the old one (a profiler sampling this thread, a traceback) would
            # make the resize fail.
            size = min(2 * len(buf), max(self.block, self.limit + 1)) if full else min(2 * len(buf), self.block)
            grown = bytearray(size)
            grown[: self.hi] = memoryview(buf)[: self.hi]
            self.buf = buf = grown
        with memoryview(buf) as mv:
            while self.hi < len(buf):
                n = self.content.readinto(mv[self.hi :])
                if not n:
                    self.eof = True
                    break
                self.hi += n

    def skip(self) -> bool:
        """Drop the whitespace at ``lo``, reading on as needed; False at the end of the content."""
        while True:
            self.lo = skip_ws(self.buf, self.lo, self.hi)
            if self.lo < self.hi:
                return True
            if self.eof:
                return False
            self.fill("whitespace")  # lo == hi: nothing is kept


class ChromeTrace:
    """Iterate over the events of a Chrome-trace JSON file in decoded chunks.

    Parameters
    ----------
    path
        ``.json`` or gzip-compressed JSON.
    event_type
        msgspec type of one event (a ``Struct`` naming only the fields needed).
    meta_type
        msgspec ``Struct`` for the top-level keys other than ``traceEvents``.
    block
        Bytes of decompressed JSON decoded at a time.
    max_event
        Largest JSON text of one event, and of the keys before or after the events array.
    max_size
        Largest decompressed content (None: no limit).
    raw_fields
        The event type holds ``msgspec.Raw`` fields, which keep a reference to the text they were
        decoded from: decode through a view of the block of its own (a ``memoryview`` of the
        window's view, sharing its buffer: no copy), so the window's views can be released while
        the values live. Their text is valid until the reader moves on to the next block (the
        buffer is overwritten in place, never resized); read them before.

    scanner
        A compiled scanner (``dtrace.readers._scan.Scanner``, see :mod:`._scanned`) or None.
        With one, each block is first offered to it: the chunks are then :class:`Scanned`
        blocks (columns, and the few events it left to msgspec decoded as ``event_type``),
        or a list of events where it gave the block back. Small documents go through the
        chunked path too.

    After iterating, :attr:`meta` holds the decoded top-level object (keys before and after
    the events merged) and :attr:`fingerprint` the hash of the file's bytes. With ``raw_fields``,
    :attr:`text` is the JSON text the latest list of events was decoded from (a view of the read
    buffer: an events array, or the whole document of a small file; valid, like the ``Raw``
    values, until the next block is read), for a reader that decodes a rare kind of event in it
    again with a type of its own; a :class:`Scanned` block carries its text itself.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        event_type: Any,
        meta_type: type,
        block: int = BLOCK,
        *,
        max_event: int = MAX_EVENT,
        max_size: int | None = None,
        raw_fields: bool = False,
        scanner: Any = None,
    ) -> None:
        self.path = os.fspath(path)
        self.scanner = scanner
        self.raw_fields = raw_fields
        self.block = block
        self.max_event = max_event
        self.max_size = max_size
        self.meta_type = meta_type
        self._events_decoder, self._meta_decoder, self._doc_decoder = _decoders(event_type, meta_type)
        self.meta: Any = None
        self.text: memoryview | None = None
        self.fingerprint: str = ""
        self.bytes_read = 0

    # -- public -------------------------------------------------------------------------
    def chunks(self) -> Iterator[Any]:
        whole = self._whole() if self.max_event >= WHOLE_MAX and self.scanner is None else None
        if whole is not None:
            if whole:
                yield whole
            return
        with Content(self.path, max_size=self.max_size) as content:
            try:
                yield from self._chunks(_Window(content, self.path, self.block, self.max_event, self._first_block()))
                content.finish()
            except (EOFError, zlib.error, OSError) as exc:
                raise InputError(self.path, _problem(exc)) from None
            finally:
                self.bytes_read = content.size
            self.fingerprint = content.fingerprint

    # -- internals ----------------------------------------------------------------------
    def _first_block(self) -> int:
        """The window's first buffer: with a scanner, a document smaller than a block and than
        the event limit is read whole into it (one block, one scan: a small rank's trace pays
        the per-block work once; no limit can be reached inside it), else :data:`_FIRST_BLOCK`."""
        if self.scanner is None:
            return _FIRST_BLOCK
        expect = _content_size_hint(self.path)
        if expect is None or not _FIRST_BLOCK < expect + 1 < min(self.block, self.max_event):
            return _FIRST_BLOCK
        return expect + 1  # one byte more: the read that returns nothing sees the end

    def _whole(self) -> list[Any] | None:
        """All events of a small document in one decode, or None (too large, or not decodable
        in one piece: the chunked path then reads it and names the problem)."""
        expect = _content_size_hint(self.path)
        if expect is None or expect > WHOLE_MAX:
            return None
        buf = bytearray(expect + 1)  # one byte more: reading it means the hint was wrong
        n = 0
        with Content(self.path, max_size=self.max_size) as content:
            try:
                with memoryview(buf) as mv:
                    while n < len(buf):
                        got = content.readinto(mv[n:])
                        if not got:
                            break
                        n += got
                if n > expect:
                    return None
                content.finish()
            except (EOFError, zlib.error, OSError, InputError):
                return None  # the chunked path reports it
            fingerprint, size = content.fingerprint, content.size
        with memoryview(buf) as mv, mv[:n] as text:
            head = bytes(text[:64]).lstrip(_WS)
            try:
                src = memoryview(text) if self.raw_fields else text
                if head[:1] == b"[":
                    events, meta = self._events_decoder.decode(src), self._meta_decoder.decode(b"{}")
                elif head[:1] == b"{":
                    doc = self._doc_decoder.decode(src)
                    events, meta = doc.traceEvents, doc
                else:
                    return None
            except (msgspec.DecodeError, msgspec.ValidationError):
                return None
        if events is None:
            return None
        self.text = src if self.raw_fields else None
        if meta is not None and hasattr(meta, "traceEvents"):
            meta.traceEvents = None  # the events now live in the list only
        self.meta, self.fingerprint, self.bytes_read = meta, fingerprint, size
        return events

    def _chunks(self, w: _Window) -> Iterator[list[Any]]:
        """Find the events array, decode its events in place, then the keys after it.

        ``buf[lo:hi]`` is the unconsumed content and, inside the array, ``buf[lo]`` is always
        ``[``: at a confirmed boundary ``}`` ``,`` ``{`` the comma is overwritten with ``]``, the
        slice ``buf[lo:comma + 1]`` is decoded through a memoryview (no copy), and the comma
        becomes the ``[`` of the next chunk.
        """
        head_meta, bare = self._head(w)
        tail = yield from self._events(w)
        if tail is None:  # the array closed before the end of the content: read what follows it
            tail = self._after_array(w)
        rest = tail.strip(_WS)
        if bare:  # a bare events array: nothing may follow it
            if rest:
                raise InputError(self.path, "invalid JSON: unexpected text after the events array")
            rest = b"}"
        tail_meta = self._decode_meta(
            b"{" + rest.lstrip(b",").lstrip(_WS) if rest != b"}" else b"{}", "the keys after traceEvents"
        )
        self.meta = _merge(head_meta, tail_meta)

    def _head(self, w: _Window) -> tuple[Any, bool]:
        """Position ``w.lo`` on the ``[`` of the events array; decode the keys before it."""
        w.fill("the JSON before 'traceEvents'")
        if not w.skip():
            raise InputError(self.path, "the file is empty")
        first = w.buf[w.lo]
        if first == _OPEN:  # bare array form: the document is the events
            return self._decode_meta(b"{}", "the keys before traceEvents"), True
        if first != 0x7B:  # '{'
            self._no_events(bytes(w.buf[w.lo : w.hi]), w.eof)
        seen = 0  # bytes after w.lo known not to hold the document's own key
        while True:
            m = _KEY.search(w.buf, w.lo + seen, w.hi)
            if m and _is_top_level_key(w.buf, w.lo, m.start()):
                break
            if m:  # a "traceEvents" nested in another key's value (otherData, ...): not the events
                seen = m.end() - w.lo
                continue
            if w.eof:
                self._no_events(bytes(w.buf[w.lo : w.hi]), True)
            seen = max(seen, w.hi - w.lo - _KEY_TAIL)  # the key may straddle the read boundary
            w.fill("the JSON before 'traceEvents'")
        prefix = bytes(w.buf[w.lo : m.start()])
        w.lo = m.end() - 1  # the '[' of the array
        return self._decode_meta(prefix.rstrip(_WS).rstrip(b",") + b"}", "the keys before traceEvents"), False

    def _events(self, w: _Window) -> Generator[list[Any], None, bytes | None]:
        """Yield the events in chunks. Returns the text after the array if the content ended
        inside this step, else None (``w.lo`` is then just past the array's ``]``)."""
        after_event = False  # the last event was decoded; a ',' or the closing ']' comes next
        while True:
            if after_event:
                if not w.skip():
                    raise InputError(self.path, "the JSON document ends inside 'traceEvents' (truncated file?)")
                c = w.buf[w.lo]
                if c == _CLOSE:
                    w.lo += 1
                    return None
                if c != _COMMA:
                    raise InputError(
                        self.path,
                        "invalid JSON in traceEvents: expected ',' or ']' after an event "
                        f"(at content byte {w.offset + w.lo})",
                    )
                w.buf[w.lo] = _OPEN
                after_event = False
            buf = w.buf
            j = skip_ws(buf, w.lo + 1, w.hi)  # whitespace after '[' is dropped, never kept
            if j > w.lo + 1:
                buf[j - 1] = _OPEN
                w.lo = j - 1
            if w.eof:
                break
            cut = self._cut(buf, w.lo, w.hi)
            if cut is not None:
                events, w.lo = cut
                yield events
            elif w.hi == len(buf):  # full, no boundary: complete events followed by whitespace?
                trailing = self._trailing(w)
                if trailing is not None:
                    events, state = trailing
                    if events:
                        yield events
                    if state == "closed":
                        return None
                    after_event = state == "after_event"
                    continue
            w.fill("an event", 1)  # buf[lo] is the '[' before it
        # the content ended: the last events and the keys after the array
        events, tail = self._last(w.buf, w.lo, w.hi)
        if events:
            yield events
        return tail

    def _trailing(self, w: _Window) -> tuple[list[Any], str] | None:
        """A full buffer without a boundary: decode what ends before trailing whitespace.

        Handles ``... } <whitespace>`` (the ``,`` not read yet), ``... } , <whitespace>`` (the
        ``{`` not read yet) and ``... ] <keys after the array> <whitespace>`` (the end of the
        array, maybe the end of the document). Returns the events and the new state
        (``"after_event"``, ``"open"``: at a ``[``, ``"closed"``: past the array), or None if
        the unconsumed text is one unfinished event.
        """
        buf, lo, hi = w.buf, w.lo, w.hi
        p = max(buf.rfind(b"}", lo, hi), buf.rfind(b"]", lo, hi))
        if p <= lo:
            return None
        m = _TRAIL.match(buf, p + 1, hi) if buf[p] == 0x7D else None  # '}'
        if m is not None and (m.group(1) or p + 1 < hi):
            end = m.start(1) if m.group(1) else p + 1  # the comma, else the first whitespace byte
            saved = buf[end]
            buf[end] = _CLOSE
            events = self._try_decode(buf, lo, end + 1)
            if events is not None:
                if m.group(1):  # the comma becomes the '[' of the next chunk
                    buf[end] = _OPEN
                    w.lo = end
                    return events, "open"
                w.lo = hi  # only whitespace is left: drop it
                return events, "after_event"
            buf[end] = saved
        if skip_ws(buf, p + 1, hi) != hi:
            return None
        q = p + 1  # only whitespace after p: the array may have closed at or before it
        for _ in range(_MAX_TRIES):
            q = buf.rfind(b"]", lo, q)
            if q <= lo:
                break
            events = self._try_decode(buf, lo, q + 1)
            if events is not None:
                w.lo = q + 1
                return events, "closed"
        return None

    def _try_decode(self, buf: bytearray, lo: int, end: int) -> list[Any] | None:
        try:
            with memoryview(buf) as mv, mv[lo:end] as text:
                events: list[Any] = self._decode_events(text)
                return events
        except msgspec.ValidationError as exc:
            raise InputError(self.path, _validation(exc)) from None
        except msgspec.DecodeError:
            return None

    def _after_array(self, w: _Window) -> bytes:
        """The text after the events array (``, "key": value ... }``), at most ``max_event`` bytes
        of it kept; whitespace after the end of the document is skipped without keeping it."""
        if not w.skip():
            return b""
        while not w.eof:
            if w.hi == len(w.buf):  # full: maybe the document ended and only whitespace follows
                p = w.buf.rfind(b"}", w.lo, w.hi)
                if p >= w.lo and skip_ws(w.buf, p + 1, w.hi) == w.hi:
                    text = bytes(w.buf[w.lo : p + 1])
                    try:
                        msgspec.json.decode(b"{" + text.lstrip(b",").lstrip(_WS) if text != b"}" else b"{}")
                    except msgspec.DecodeError:
                        pass
                    else:  # a complete document: whatever follows must be whitespace
                        w.lo = w.hi
                        if w.skip():
                            raise InputError(
                                self.path,
                                "invalid JSON: unexpected text after the JSON document "
                                f"(at content byte {w.offset + w.lo})",
                            )
                        return text
            w.fill("the JSON after 'traceEvents'")
        return bytes(w.buf[w.lo : w.hi])

    def _no_events(self, text: bytes, eof: bool) -> None:
        """Raise the right error for a document in which no events array was found."""
        if not text.strip():
            raise InputError(self.path, "the file is empty")
        try:
            msgspec.json.decode(text) if eof else None
        except msgspec.DecodeError as exc:
            check_utf8(text)
            raise InputError(self.path, f"invalid JSON: {exc}") from None
        if text.lstrip(_WS)[:1] not in (b"{", b"["):
            raise InputError(self.path, "not a JSON trace (does not start with '{' or '[')")
        raise InputError(self.path, "no 'traceEvents' array in the JSON document")

    def _decode_meta(self, text: bytes, where: str) -> Any:
        try:
            return self._meta_decoder.decode(text)
        except msgspec.ValidationError as exc:
            raise InputError(self.path, f"unexpected value in {where}: {exc}") from None
        except msgspec.DecodeError as exc:
            check_utf8(text)
            raise InputError(self.path, f"invalid JSON in {where}: {exc}") from None

    def _decode_events(self, text: bytes | memoryview) -> Any:
        """The events of ``text`` (a JSON array): a list of ``event_type``, or with a scanner a
        :class:`Scanned` block. Raises msgspec's errors as the pure decoder does."""
        if self.scanner is not None:
            got = self.scanner.scan(text)
            if got is not None:
                block = Scanned(got, memoryview(text))
                if not block.fb_spans.size or self._decode_fallback(block):
                    return block
                # the spans did not decode alone: the whole block goes through msgspec
        if not self.raw_fields:
            return self._events_decoder.decode(text)
        self.text = memoryview(text)
        return self._events_decoder.decode(self.text)

    def _decode_fallback(self, block: Scanned) -> bool:
        """Decode the events the scanner left to msgspec (their byte spans, in one call); False
        if they do not decode alone (never expected: the scanner checked their JSON)."""
        assert join_spans is not None  # a scanned block: the extension is built
        joined = b"[" + join_spans(block.text, np.ascontiguousarray(block.fb_spans), _COMMA)[:-1] + b"]"
        try:
            block.fallback = self._events_decoder.decode(joined)
        except msgspec.DecodeError:
            return False
        return True

    def _cut(self, buf: bytearray, lo: int, hi: int) -> tuple[list[Any], int] | None:
        """Decode the events of ``buf[lo:hi]`` before its last confirmed boundary.

        Candidates ``}`` ``,`` ``{`` are found from the end by a regex over a reversed copy of
        the last ``_WINDOW`` bytes (then, if none of those confirms, of the whole text), so the
        cost is C-speed scanning whatever the text holds. Returns the events and the new ``lo``
        (the boundary's comma, now ``[``), or None.
        """
        failed: set[int] = set()
        starts = (max(lo, hi - _WINDOW), lo) if hi - lo > _WINDOW else (lo,)
        for start in starts:
            rev = buf[start:hi][::-1]
            for m in _REV_SEP.finditer(rev):
                j = hi - 1 - m.start(1)  # the comma
                if j in failed:
                    continue
                buf[j] = _CLOSE
                try:
                    with memoryview(buf) as mv, mv[lo : j + 1] as text:
                        events = self._decode_events(text)
                except msgspec.ValidationError as exc:
                    raise InputError(self.path, _validation(exc)) from None
                except msgspec.DecodeError:
                    buf[j] = _COMMA
                    failed.add(j)
                    if len(failed) >= _MAX_TRIES:
                        return None
                    continue
                buf[j] = _OPEN  # the start of the next chunk
                return events, j
            del rev
        return None

    def _last(self, buf: bytearray, lo: int, hi: int) -> tuple[list[Any], bytes]:
        """Split the final text ``buf[lo:hi]`` (``buf[lo]`` is the ``[`` before the last events)
        into the last events and the text after the array. The events are decoded in place, as
        :meth:`_cut` does: no copy of the final block, which is the whole content of a small file."""
        if skip_ws(buf, lo + 1, hi) == hi:
            raise InputError(self.path, "the JSON document ends inside 'traceEvents' (truncated file?)")
        i = hi
        # keep the message, not the exception: its traceback holds this frame (and through it the
        # read buffer), a reference cycle that only the cyclic GC would free
        last_error: str | None = None
        for _ in range(_MAX_TRIES):
            i = buf.rfind(b"]", lo + 1, i)
            if i < 0:
                break
            before = _last_byte(buf, lo + 1, i)
            if before is not None and before != 0x7D:  # '}': only an event may end the array
                continue
            try:
                with memoryview(buf) as mv, mv[lo : i + 1] as text:
                    return self._decode_events(text), bytes(buf[i + 1 : hi])
            except msgspec.ValidationError as exc:
                raise InputError(self.path, _validation(exc)) from None
            except msgspec.DecodeError as exc:
                last_error = str(exc)
                continue
        if last_error is not None:
            check_utf8(bytes(buf[lo:hi]))  # a copy: an exception must not hold a view of the read buffer
            raise InputError(self.path, f"invalid JSON in traceEvents: {last_error}")
        raise InputError(self.path, "the JSON document ends inside 'traceEvents' (truncated file?)")


def check_utf8(text: bytes) -> None:
    """Raise the ``UnicodeDecodeError`` of ``text`` if it is not UTF-8 (naming its first bad
    byte), for text that JSON decoding refused: msgspec 0.23 says only "Invalid UTF-8 encoded
    string" where 0.22 raised that error itself."""
    text.decode("utf-8")


class Scanned:
    """A block of events as the compiled scanner returned it (see :mod:`._scanned`).

    ``cols`` are its per-record columns (bytearrays, one record per complete event and per event
    left to msgspec, in file order), ``fb_recs``/``fb_spans`` the records and byte spans of
    the events left to msgspec and ``fallback`` those events decoded, ``aux`` the
    (record, field, start, end) spans of argument texts, ``text`` the block (a view of the
    read buffer: valid until the next block is read).
    """

    __slots__ = ("n", "cols", "fb_recs", "fb_spans", "aux", "text", "fallback")

    def __init__(self, got: tuple[Any, ...], text: memoryview) -> None:
        self.n: int = got[0]
        self.cols: tuple[bytearray, ...] = got[1:-2]
        fb = np.frombuffer(got[-2], np.int64).reshape(-1, 3)
        self.fb_recs = fb[:, 0]
        self.fb_spans = fb[:, 1:]
        self.aux = np.frombuffer(got[-1], np.int64).reshape(-1, 4)
        self.text = text
        self.fallback: list[Any] = []


def _validation(exc: msgspec.ValidationError) -> str:
    msg = str(exc)
    # "$[123].ts" is relative to the chunk; the field is what helps the user
    msg = re.sub(r"\$\[\d+\]", "event", msg)
    if msg.startswith("Number out of range"):  # 1e400: no float64 holds it, so no event can be kept
        return f"an event has a number beyond the float64 range: {msg}"
    return f"an event has a value of the wrong type: {msg}"


def _merge(a: Any, b: Any) -> Any:
    """The keys before the events (``a``) and after them (``b``) as one document: a key given on
    both sides takes its value after the events, as JSON's last key wins (and the whole-document
    decode does)."""
    if b is None:
        return a
    for f in a.__struct_fields__:
        vb = getattr(b, f)
        if vb is not None:
            setattr(a, f, vb)
    return a


_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')
_KEY_TAIL = 64
"""More than the longest match of the events key's pattern (whitespace aside)."""


def _is_top_level_key(buf: bytearray, lo: int, at: int) -> bool:
    """Whether the string starting at ``buf[at]`` is a key of the document's own object (which
    opens at ``buf[lo]``), not a string nested in a value or inside another string.

    Examples
    --------
    >>> doc = bytearray(b'{"otherData": {"traceEvents": [1]}, "x": "\\"traceEvents\\"", "traceEvents": [2]}')
    >>> [_is_top_level_key(doc, 0, m.start()) for m in re.finditer(rb'"traceEvents"', doc)]
    [False, False, True]
    """
    depth = 0
    for m in _TOKEN.finditer(buf, lo, at + 1 + len(b"traceEvents") + 1):
        start = m.start()
        if start >= at:
            return start == at and depth == 1
        c = buf[start]
        if c in b"{[":
            depth += 1
        elif c in b"}]":
            depth -= 1
    return False
