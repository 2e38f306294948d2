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
"""
from __future__ import annotations

import os
import re
import zlib
from typing import Any, Iterator, TypeVar

import msgspec

from ..errors import InputError
from ._io import BLOCK, Content

T = TypeVar("T")
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_WS = b" \t\r\n"
_MAX_PREFIX = 256 << 20
_MAX_TRIES = 64
_FIRST_BLOCK = 1 << 16


def _problem(exc: Exception) -> str:
    if isinstance(exc, (EOFError,)) or "end-of-stream" in str(exc) or "truncated" in str(exc).lower():
        return "truncated or corrupt gzip stream (the file ended early)"
    if isinstance(exc, (zlib.error, OSError)):
        return f"corrupt gzip stream: {exc}"
    return f"invalid JSON: {exc}"


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

    After iterating, :attr:`meta` holds the decoded top-level object (keys before and after
    the events merged) and :attr:`fingerprint` the hash of the file's bytes.
    """

    def __init__(self, path: str | os.PathLike[str], event_type: Any, meta_type: type[T],
                 block: int = BLOCK) -> None:
        self.path = os.fspath(path)
        self.block = block
        self.meta_type = meta_type
        self._events_decoder = msgspec.json.Decoder(list[event_type])  # type: ignore[valid-type]
        self._meta_decoder = msgspec.json.Decoder(meta_type)
        self.meta: Any = None
        self.fingerprint: str = ""
        self.bytes_read = 0

    # -- public -------------------------------------------------------------------------
    def chunks(self) -> Iterator[list[Any]]:
        with Content(self.path) as content:
            try:
                yield from self._chunks(content)
                content.finish()
            except (EOFError, zlib.error, OSError) as exc:
                raise InputError(self.path, _problem(exc)) from None
            self.fingerprint = content.fingerprint

    # -- internals ----------------------------------------------------------------------
    def _chunks(self, content: Content) -> Iterator[list[Any]]:
        """Decode the events in place in one reusable buffer.

        ``buf[lo:hi]`` is the unconsumed content and ``buf[lo]`` is always ``[``: at a confirmed
        boundary ``}`` ``,`` ``{`` the comma is overwritten with ``]``, the slice
        ``buf[lo:comma + 1]`` is decoded through a memoryview (no copy), and the comma becomes
        the ``[`` of the next chunk. The buffer only grows when one event is larger than it.
        """
        buf = bytearray(min(self.block, _FIRST_BLOCK))  # small files never pay for a full block
        lo = hi = 0
        eof = False

        def fill() -> None:
            nonlocal lo, hi, eof, buf
            if lo:  # move the unconsumed tail (usually part of one event) to the front
                rest = bytes(buf[lo:hi])
                buf[:len(rest)] = rest
                lo, hi = 0, len(rest)
            if hi == len(buf) or len(buf) < self.block:
                # grow: up to the block size as the file turns out large, beyond it only when one
                # event is larger than the buffer (full and no boundary in it). A new buffer, never
                # an in-place resize: a frame still holding a view of the old one (a profiler
                # sampling this thread, a traceback) would make the resize fail.
                grown = bytearray(len(buf) + (len(buf) if hi == len(buf) else min(len(buf), self.block - len(buf))))
                grown[:hi] = memoryview(buf)[:hi]
                buf = grown
            with memoryview(buf) as mv:
                while hi < len(buf):
                    n = content.readinto(mv[hi:])
                    if not n:
                        eof = True
                        break
                    hi += n
                    self.bytes_read += n

        # 1. find the start of the events array
        bare = False
        fill()
        while True:
            head = bytes(buf[:min(hi, 64)]).lstrip(_WS)
            if head[:1] == b"[":  # bare array form: the document is the events
                lo = bytes(buf[:hi]).index(b"[")
                prefix = b"{"
                bare = True
                break
            m = _KEY.search(buf, 0, hi)
            if m:
                lo = m.end() - 1  # the '[' of the array
                prefix = bytes(buf[:m.start()])
                break
            if eof or hi > _MAX_PREFIX:
                self._no_events(bytes(buf[:hi]), eof)
            lo = 0
            fill()
        head_meta = self._decode_meta(prefix.rstrip(_WS).rstrip(b",") + b"}", "the keys before traceEvents")

        # 2. the events, cut at confirmed boundaries
        while not eof:
            fill()
            if eof:
                break
            cut = self._cut(buf, lo, hi)
            if cut is not None:
                events, lo = cut
                yield events
            # else: no boundary in the whole buffer; fill() grows it

        # 3. the last events and the keys after the array
        events, tail = self._last(bytes(buf[lo + 1:hi]))
        if events:
            yield events
        rest = tail.strip(_WS)
        if bare:  # a bare events array: nothing may follow it
            if rest:
                raise InputError(self.path, "invalid JSON: unexpected text after the events array")
            rest = b"}"
        tail_meta = self._decode_meta(b"{" + rest.lstrip(b",").lstrip(_WS) if rest != b"}" else b"{}",
                                      "the keys after traceEvents")
        self.meta = _merge(head_meta, tail_meta)

    def _no_events(self, text: bytes, eof: bool) -> None:
        """Raise the right error for a document in which no events array was found."""
        if not text.strip():
            raise InputError(self.path, "the file is empty")
        try:
            msgspec.json.decode(text) if eof else None
        except msgspec.DecodeError as exc:
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
            raise InputError(self.path, f"invalid JSON in {where}: {exc}") from None

    def _decode_events(self, text: bytes | memoryview) -> list[Any]:
        return self._events_decoder.decode(text)

    def _cut(self, buf: bytearray, lo: int, hi: int) -> tuple[list[Any], int] | None:
        """Decode the events of ``buf[lo:hi]`` before its last confirmed boundary.

        Returns the events and the new ``lo`` (the boundary's comma, now ``[``), or None.
        """
        pos = hi
        for _ in range(_MAX_TRIES):
            close = buf.rfind(b"}", lo, pos)
            if close < 0:
                return None
            pos = close
            j = close + 1
            while j < hi and buf[j] in _WS:
                j += 1
            if j >= hi or buf[j] != 0x2C:  # ','
                continue
            k = j + 1
            while k < hi and buf[k] in _WS:
                k += 1
            if k >= hi or buf[k] != 0x7B:  # '{'
                continue
            buf[j] = 0x5D  # ']'
            try:
                with memoryview(buf) as mv, mv[lo:j + 1] as text:
                    events = self._decode_events(text)
            except msgspec.ValidationError as exc:
                raise InputError(self.path, _validation(exc)) from None
            except msgspec.DecodeError:
                buf[j] = 0x2C
                continue
            buf[j] = 0x5B  # '[': the start of the next chunk
            return events, j
        return None

    def _last(self, text: bytes) -> tuple[list[Any], bytes]:
        """Split the final text into the last events and the text after the array."""
        if not text.strip(_WS):
            raise InputError(self.path, "the JSON document ends inside 'traceEvents' (truncated file?)")
        i = len(text)
        # keep the message, not the exception: its traceback holds this frame (and through it the
        # read buffer), a reference cycle that only the cyclic GC would free
        last_error: str | None = None
        for _ in range(_MAX_TRIES):
            i = text.rfind(b"]", 0, i)
            if i < 0:
                break
            body = text[:i].rstrip(_WS)
            if body and not body.endswith(b"}"):
                continue
            try:
                return self._decode_events(b"[" + body + b"]"), text[i + 1:]
            except msgspec.ValidationError as exc:
                raise InputError(self.path, _validation(exc)) from None
            except msgspec.DecodeError as exc:
                last_error = str(exc)
                continue
        if last_error is not None:
            raise InputError(self.path, f"invalid JSON in traceEvents: {last_error}")
        raise InputError(self.path, "the JSON document ends inside 'traceEvents' (truncated file?)")


def _validation(exc: msgspec.ValidationError) -> str:
    msg = str(exc)
    # "$[123].ts" is relative to the chunk; the field is what helps the user
    msg = re.sub(r"\$\[\d+\]", "event", msg)
    return f"an event has a value of the wrong type: {msg}"


def _merge(a: Any, b: Any) -> Any:
    """Fields set in ``b`` (after the events) override unset ones of ``a``."""
    if b is None:
        return a
    for f in a.__struct_fields__:
        vb = getattr(b, f)
        if vb is not None and getattr(a, f) is None:
            setattr(a, f, vb)
    return a
