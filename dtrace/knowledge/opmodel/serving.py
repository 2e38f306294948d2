"""Serving steps: the prefill/decode phase a step annotation names, and the sequences it sums
(docs/semantics.md, "Op performance model").

An inference server runs *steps*: a batch of requests goes through the model once. A request in
its **prefill** (context) phase feeds its prompt — many query tokens, causal attention among them
and to any cached prefix; one in its **decode** (generation) phase feeds one new token that
attends to its whole context. A step can hold both (**mixed**: chunked prefill beside decodes).
The model's ops cannot tell: an ``aiter::gemm_a16w16`` of 15,360 rows may be one prefill or a
large decode batch. Two annotations the servers record around a step say it:

``execute_<tokens>_context_<c>(sq<a>sk<b>sqsq<c>sqsk<d>)_generation_<g>(sq..sk..sqsq..sqsk..)``
    vLLM's and SGLang's profiled step (the shared ``vllm_piecewise_graph_execution`` and
    ``sglang_qwen3_8b_prefilldecode`` traces): ``c`` context (prefill) requests and ``g``
    generation (decode) requests, each with the sums over its requests of the query lengths
    ``sq``, the key (context) lengths ``sk``, ``sq²`` and ``sq·sk``. An older form
    ``execute_context_<c>(<Σsq>_<Σsq²>)_generation_<g>(<n>)`` (``b200_vllm_eager_rank0``) gives
    the context sums without the key lengths: a context request is taken to have no cached
    prefix (``sk = sq``), and the generation sums are unknown.
``step[<MODE> ...]``
    SGLang's forward mode: ``EXTEND``, ``PREFILL`` and ``SPLIT_PREFILL`` are prefill,
    ``DECODE`` decode, ``MIXED`` both.

:func:`read_marker` reads one annotation name; the phase of an op instance is that of the
nearest such annotation above it. The sums (:class:`Step`) are what attention over a paged KV
cache needs and its recorded arguments lack (they hold the batch's tokens, not the sequences).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFILL, DECODE, MIXED = "prefill", "decode", "mixed"
PHASES = (PREFILL, DECODE, MIXED)

_EXECUTE = re.compile(r"execute_(?:\d+_)?context_(\d+)\(([^)]*)\)_generation_(\d+)\(([^)]*)\)")
_SUMS = re.compile(r"sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)")
_OLD_CONTEXT = re.compile(r"(\d+)_(\d+)")
_MODE = re.compile(r"step\[([A-Z_]+)\b")
_MODES = {"EXTEND": PREFILL, "PREFILL": PREFILL, "SPLIT_PREFILL": PREFILL, "DECODE": DECODE, "MIXED": MIXED}
_PREFIXES = ("execute_", "step[")


@dataclass(frozen=True)
class Sums:
    """The sums over the requests of one phase of a step: their number, ``Σsq``, ``Σsk``,
    ``Σsq²`` and ``Σsq·sk`` (query and key lengths)."""

    n: int
    sq: int
    sk: int
    sqsq: int
    sqsk: int

    def pairs(self, causal: bool) -> int:
        """The (query, key) pairs attended: ``Σ sq·sk``, or causally (each request's queries are
        its last ``sq`` of ``sk`` positions) ``Σ (sq·sk − sq(sq−1)/2) = Σsq·sk − (Σsq² − Σsq)/2``.

        >>> Sums(2, 4, 10, 8, 20).pairs(False), Sums(2, 4, 10, 8, 20).pairs(True)  # 2 requests of 2 queries, 5 keys
        (20, 18)
        """
        return self.sqsk - (self.sqsq - self.sq) // 2 if causal else self.sqsk


@dataclass(frozen=True)
class Step:
    """A serving step's requests: the context (prefill) and the generation (decode) ones."""

    context: Sums
    generation: Sums

    @property
    def phase(self) -> str:
        c, g = self.context.n > 0, self.generation.n > 0
        return MIXED if c and g else PREFILL if c else DECODE if g else ""

    def total(self, causal: bool) -> tuple[int, int, int]:
        """``(Σsq, Σsk, pairs)`` over every request of the step."""
        c, g = self.context, self.generation
        return c.sq + g.sq, c.sk + g.sk, c.pairs(causal) + g.pairs(causal)

    def text(self) -> str:
        """The canonical text of the sums (the ``seqs`` column); :meth:`parse` reads it back.

        >>> s = Step(Sums(9, 8155, 8430, 7475785, 7671310), Sums(37, 37, 34489, 37, 34489))
        >>> s.text()
        'context=9 sq=8155 sk=8430 sqsq=7475785 sqsk=7671310; generation=37 sq=37 sk=34489 sqsq=37 sqsk=34489'
        >>> Step.parse(s.text()) == s
        True
        """
        c, g = self.context, self.generation
        return (
            f"context={c.n} sq={c.sq} sk={c.sk} sqsq={c.sqsq} sqsk={c.sqsk}; "
            f"generation={g.n} sq={g.sq} sk={g.sk} sqsq={g.sqsq} sqsk={g.sqsk}"
        )

    @classmethod
    def parse(cls, text: str) -> "Step | None":
        """The step of a :meth:`text` (None for ``""`` or anything else)."""
        parts = text.split(";")
        if len(parts) != 2:
            return None
        sums = []
        for part in parts:
            vals = re.findall(r"=(\d+)", part)
            if len(vals) != 5:
                return None
            sums.append(Sums(*map(int, vals)))
        return cls(sums[0], sums[1])


def _execute(m: re.Match[str]) -> tuple[str, Step | None]:
    """The phase and (when its sums are all there) the step of an ``execute_..`` annotation."""
    n_c, n_g = int(m.group(1)), int(m.group(3))
    phase = MIXED if n_c and n_g else PREFILL if n_c else DECODE if n_g else ""
    c, g = _SUMS.fullmatch(m.group(2)), _SUMS.fullmatch(m.group(4))
    if c and g:
        return phase, Step(Sums(n_c, *map(int, c.groups())), Sums(n_g, *map(int, g.groups())))
    old = _OLD_CONTEXT.fullmatch(m.group(2))
    if old and n_g == 0:  # the old form: no key lengths (no cached prefix assumed), no decode sums
        sq, sqsq = int(old.group(1)), int(old.group(2))
        return phase, Step(Sums(n_c, sq, sq, sqsq, sqsq), Sums(0, 0, 0, 0, 0))
    return phase, None


def read_marker(name: str) -> tuple[str, str]:
    """``(phase, step text)`` of an annotation name: the phase (``prefill``, ``decode``,
    ``mixed``) a step annotation names and the text of its sums (``""``: none), ``("", "")`` for
    any other name.

    Examples
    --------
    >>> read_marker("step[DECODE bs=64 toks=64]"), read_marker("ProfilerStep#3")
    (('decode', ''), ('', ''))
    >>> read_marker("execute_15360_context_15(sq15360sk15360sqsq15728640sqsk15728640)_generation_0(sq0sk0sqsq0sqsk0)")[0]
    'prefill'
    >>> read_marker("execute_context_1(888_788544)_generation_0(0)")[1]
    'context=1 sq=888 sk=888 sqsq=788544 sqsk=788544; generation=0 sq=0 sk=0 sqsq=0 sqsk=0'
    """
    if not name.startswith(_PREFIXES):
        return "", ""
    m = _EXECUTE.match(name)
    if m is not None:
        phase, step = _execute(m)
        return phase, step.text() if step is not None else ""
    mode = _MODE.match(name)
    return (_MODES.get(mode.group(1), ""), "") if mode else ("", "")
