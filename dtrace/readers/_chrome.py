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
"""
from __future__ import annotations

import os
import re
import zlib
from typing import Any, Iterator, TypeVar

import msgspec

from ..errors import InputError
from ._io import BLOCK, iter_blocks

T = TypeVar("T")
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_WS = b" \t\r\n"
_MAX_PREFIX = 256 << 20
_MAX_TRIES = 64


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
    the events merged) and :attr:`sha256` the hash of the file's bytes.
    """

    def __init__(self, path: str | os.PathLike[str], event_type: Any, meta_type: type[T],
                 block: int = BLOCK) -> None:
        self.path = os.fspath(path)
        self.block = block
        self.meta_type = meta_type
        self._events_decoder = msgspec.json.Decoder(list[event_type])  # type: ignore[valid-type]
        self._meta_decoder = msgspec.json.Decoder(meta_type)
        self.meta: Any = None
        self.sha256: str = ""
        self.bytes_read = 0

    # -- public -------------------------------------------------------------------------
    def chunks(self) -> Iterator[list[Any]]:
        blocks, hashing = iter_blocks(self.path, self.block)
        try:
            yield from self._chunks(blocks)
        except (EOFError, zlib.error, OSError) as exc:
            raise InputError(self.path, _problem(exc)) from None
        finally:
            blocks.close()  # type: ignore[attr-defined]
        self.sha256 = hashing.hash.hexdigest()

    # -- internals ----------------------------------------------------------------------
    def _chunks(self, blocks: Iterator[bytes]) -> Iterator[list[Any]]:
        buf = bytearray()
        eof = False

        def more() -> bool:
            nonlocal eof
            if eof:
                return False
            try:
                b = next(blocks)
            except StopIteration:
                eof = True
                return False
            self.bytes_read += len(b)
            buf.extend(b)
            return True

        # 1. find the start of the events array
        start = -1
        prefix = b""
        bare = False
        while True:
            stripped = bytes(buf[:64]).lstrip(_WS)
            if stripped[:1] == b"[":  # bare array form: the document is the events
                start = len(buf) - len(bytes(buf).lstrip(_WS)) + 1
                prefix = b"{"
                bare = True
                break
            m = _KEY.search(buf)
            if m:
                start = m.end()
                prefix = bytes(buf[:m.start()])
                break
            if not more():
                break
            if len(buf) > _MAX_PREFIX:
                break
        if start < 0:
            if not bytes(buf).strip():
                raise InputError(self.path, "the file is empty")
            head = bytes(buf[:1]).lstrip(_WS)
            try:
                msgspec.json.decode(bytes(buf)) if eof else None
            except msgspec.DecodeError as exc:
                raise InputError(self.path, f"invalid JSON: {exc}") from None
            if head[:1] not in (b"{", b"[") and bytes(buf).lstrip(_WS)[:1] not in (b"{", b"["):
                raise InputError(self.path, "not a JSON trace (does not start with '{' or '[')")
            raise InputError(self.path, "no 'traceEvents' array in the JSON document")
        head_meta = self._decode_meta(prefix.rstrip(_WS).rstrip(b",") + b"}", "the keys before traceEvents")
        del buf[:start]

        # 2. the events, cut at confirmed boundaries
        while True:
            while len(buf) < self.block and more():
                pass
            if eof:
                break
            cut = self._cut(buf)
            if cut is None:  # no boundary in this buffer: read more and try again
                if not more():
                    break
                continue
            events, n = cut
            yield events
            del buf[:n]

        # 3. the last events and the keys after the array
        events, tail = self._last(buf)
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

    def _decode_meta(self, text: bytes, where: str) -> Any:
        try:
            return self._meta_decoder.decode(text)
        except msgspec.ValidationError as exc:
            raise InputError(self.path, f"unexpected value in {where}: {exc}") from None
        except msgspec.DecodeError as exc:
            raise InputError(self.path, f"invalid JSON in {where}: {exc}") from None

    def _decode_events(self, text: bytes) -> list[Any]:
        return self._events_decoder.decode(text)

    def _cut(self, buf: bytearray) -> tuple[list[Any], int] | None:
        """Decode the events before the last confirmed boundary of ``buf``."""
        pos = len(buf)
        floor = 0
        for _ in range(_MAX_TRIES):
            close = buf.rfind(b"}", floor, pos)
            if close < 0:
                return None
            j = close + 1
            while j < len(buf) and buf[j] in _WS:
                j += 1
            if j >= len(buf) or buf[j] != 0x2C:  # ','
                pos = close
                continue
            k = j + 1
            while k < len(buf) and buf[k] in _WS:
                k += 1
            if k >= len(buf) or buf[k] != 0x7B:  # '{'
                pos = close
                continue
            try:
                events = self._decode_events(b"[" + buf[:close + 1] + b"]")
            except msgspec.ValidationError as exc:
                raise InputError(self.path, _validation(exc)) from None
            except msgspec.DecodeError:
                pos = close
                continue
            return events, k
        return None

    def _last(self, buf: bytearray) -> tuple[list[Any], bytes]:
        """Split the final buffer into the last events and the text after the array."""
        text = bytes(buf)
        if not text.strip(_WS):
            raise InputError(self.path, "the JSON document ends inside 'traceEvents' (truncated file?)")
        i = len(text)
        last_exc: Exception | None = None
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
                last_exc = exc
                continue
        if last_exc is not None:
            raise InputError(self.path, f"invalid JSON in traceEvents: {last_exc}")
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
