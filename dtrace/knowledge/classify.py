"""Kernel classes (docs/semantics.md, "Kernels and classes"): one built-in classifier, two map formats.

Three classifiers, one interface (:class:`Classifier`: distinct names in, class names out):

- :class:`BuiltinClassifier`: gemm (convolutions lowered to GEMM included), attention,
  communication split by collective (``nccl_allreduce``, ``nccl_allgather``,
  ``nccl_reducescatter``, ``nccl_sendrecv`` for send/recv/all-to-all, ``nccl_broadcast``,
  ``nccl_other``), triton, normalization (norms and softmax), reduction, elementwise, memcpy,
  memset; leftover ``other``. Ordered case-insensitive rules, first match wins
  (:data:`BUILTIN_RULES`).
- :class:`SubstringMap`: the GPU Performance Analyser's ``kernel_to_class_map``
  (``{"gemm": "gemm", ...}``, alone or inside its config). Keys and classes are lower-cased as
  that tool does; the first key contained in the lower-cased name wins; a name containing
  ``nccl`` is class ``nccl`` before any key is tried; leftover ``others``. Memory copies and
  memsets are not kernels for that tool (it reports them in its own table): here they keep the
  classes ``memcpy`` and ``memset``.
- :class:`RegexMap`: gputrc2graph's ``{engine: {model: {regex: category}}}`` files, loaded
  unchanged: ``re.search`` (case-sensitive) in the file's key order, first match wins, leftover
  ``misc`` (what those files map ``.*`` to). The tool reads ``nsys stats`` output, where memory
  operations are named ``[CUDA memcpy Host-to-Device]`` / ``[CUDA memset]`` (hence its
  ``"CUDA mem"`` key); memory events of other formats are matched under that nsys name, so
  these files classify them as they do for nsys.

Every classifier works on distinct (name, kind, category) triples and memoises its answers,
so a name is classified once per process however many events or partitions carry it.

Examples
--------
>>> BuiltinClassifier().classify(["ncclDevKernel_AllGather_RING_LL", "sm90_xmma_gemm_bf16",
...                               "triton_poi_fused_add_0", "Memcpy HtoD (Pageable -> Device)"],
...                              ["kernel", "kernel", "kernel", "memcpy"],
...                              ["comm", "compute", "compute", "memcpy"])
['nccl_allgather', 'gemm', 'triton', 'memcpy']
>>> SubstringMap({"GEMM": "Gemm", "fusion": "fusion"}).classify(
...     ["xmma_gemm_f32f32", "ncclKernel_SendRecv", "loop_fusion_1", "copy_kernel"])
['gemm', 'nccl', 'fusion', 'others']
"""

from __future__ import annotations

import abc
import functools
import json
import os
import re
from typing import Any, Iterable, Sequence, cast

import numpy as np

from ..core.fileio import read_regular
from ..errors import UsageError

OTHER = "other"
MAX_CLASSMAP_BYTES = 64 << 20
"""The largest class-map file read (the largest seed-tool map is a few KB)."""
SUBSTRING_LEFTOVER = "others"
SUBSTRING_NCCL = "nccl"
REGEX_LEFTOVER = "misc"

# (class, pattern): case-insensitive re.search, first match wins, tried on the kernel's identifier
# (:func:`kernel_identifier`) and, if no rule matches it, on the full name (template arguments
# name the real work of wrappers such as ``cutlass::Kernel<...gemm...>``). Memory events (kind
# memcpy/memset, category memcpy, ROCm fill kernels) and communication (category comm) are
# decided first.
BUILTIN_RULES: list[tuple[str, str]] = [
    ("attention", r"flash|fmha|attention|attn|(?<![a-z])mha|_mla_|::mla::|scaled_dot_product"),
    # Cijk_*: Tensile / hipBLASLt GEMMs (rocBLAS, hipBLASLt, XLA on ROCm); *scudnn*: cuDNN implicit-GEMM convolutions
    (
        "gemm",
        r"(?<!fb)gemm|gemv|matmul|nvjet|cublas|xmma|wgmma|cutlass.*tensorop|s16816|h16816|s1688|i8816"
        r"|bmm|splitkreduce|convolution|convolve|conv[123]d|_conv_|winograd|fprop|dgrad|wgrad"
        r"|(?<![a-z])cijk_|[sh]cudnn",
    ),
    ("triton", r"triton"),
    (
        "normalization",
        r"layer_?norm|rms_?norm|group_?norm|batch_?norm|instance_?norm|_norm_|norm_kernel"
        r"|softmax|welford|moments|bn_fw|bn_bw|ln_fwd|ln_bwd|gammabeta",
    ),
    # pooling reduces a window; sorting sits with top-k and scans
    (
        "reduction",
        r"reduce|reduction|scan|cumsum|cumprod|argmax|argmin|topk|sum_kernel|_sum_|mean_kernel"
        r"|max_kernel|min_kernel|(max|avg)_?pool|pooling|radix_?sort|segmented_?sort|sort_?kernel",
    ),
    # SubTensorOp*: MIOpen sub-tensor set/scale/copy; im2col and permutes move data
    (
        "elementwise",
        r"elementwise|pointwise|vectorized|unrolled|fill|copy|cast|silu|gelu|relu|act_and_mul"
        r"|sigmoid|tanh|rotary|quant|functor|transpose|nchwtonhwc|nhwctonchw|catarray|index"
        r"|gather|scatter|subtensorop|im[23]d?2col|col2im|permute",
    ),
]

# communication kernels: collective type from the name (case-insensitive, first match wins)
COLLECTIVE_RULES: list[tuple[str, str]] = [
    ("reducescatter", r"reduce_?scatter"),
    ("allreduce", r"all_?reduce|cross_device_reduce"),
    ("allgather", r"all_?gather"),
    ("sendrecv", r"send|recv|all_?to_?all|p2p"),
    ("broadcast", r"broadcast|bcast"),
]
COLLECTIVE_LABELS = {
    "allreduce": "AllReduce",
    "allgather": "AllGather",
    "reducescatter": "ReduceScatter",
    "sendrecv": "SendRecv",
    "broadcast": "Broadcast",
    "other": "Other",
}

_ROCM_FILL = re.compile(r"^__amd_rocclr_fill", re.I)
_NSYS_COPY = {
    "H2D": "Host-to-Device",
    "D2H": "Device-to-Host",
    "D2D": "Device-to-Device",
    "P2P": "Peer-to-Peer",
    "H2H": "Host-to-Host",
}


def kernel_identifier(name: str) -> str:
    """The kernel's identifier without return type, template and argument lists.

    Examples
    --------
    >>> kernel_identifier("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float> >(float*)")
    'at::native::reduce_kernel'
    >>> kernel_identifier("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(float*)")
    'at::native::(anonymous)::cunn_SoftMaxForward'
    """
    s = name[5:] if name.startswith("void ") else name
    s = s.replace("(anonymous namespace)", "{anonymous}")  # a namespace, not an argument list
    cut = min((i for i in (s.find("<"), s.find("(")) if i > 0), default=len(s))
    return s[:cut].strip().replace("{anonymous}", "(anonymous)")


def collective_type(name: str) -> str:
    """Collective of a communication kernel: ``allreduce``, ..., or ``other``.

    Examples
    --------
    >>> collective_type("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL")
    'reducescatter'
    >>> collective_type("multimem_all_reduce_kernel")
    'allreduce'
    """
    for label, rx in _COLLECTIVE_RX:
        if rx.search(name):
            return label
    return "other"


_COLLECTIVE_RX = [(label, re.compile(p, re.I)) for label, p in COLLECTIVE_RULES]


def collective_label(name: str, collective: str = "") -> str:
    """Label of a communication kernel in the per-collective (NCCL) table.

    The GPU Performance Analyser's rule for NCCL kernels, ``name.split("_")[1]``
    (``ncclDevKernel_AllGather_RING_LL`` → ``AllGather``), cut at the argument or template list;
    other communication kernels get the label of their :func:`collective_type`. A kernel whose
    name names no collective (RCCL's ``ncclDevKernel_Generic``) takes it from ``collective``, the
    collective its args (or its enclosing ``record_param_comms``) state, when given.

    Examples
    --------
    >>> collective_label("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)")
    'SendRecv'
    >>> collective_label("cross_device_reduce_1stage")
    'AllReduce'
    >>> collective_label("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)")
    'Generic'
    >>> collective_label("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "all_reduce")
    'AllReduce'
    """
    if collective and collective_type(name) == "other":
        return COLLECTIVE_LABELS[collective_type(collective)]
    if "nccl" in name.lower():
        parts = name.split("_")
        label = re.split(r"[(<]", parts[1], maxsplit=1)[0] if len(parts) > 1 else ""
        if label:
            return label
    return COLLECTIVE_LABELS[collective_type(name)]


def nsys_memop_name(name: str, kind: str) -> str:
    """The name ``nsys stats`` gives a memory operation (``[CUDA memcpy Host-to-Device]``).

    Names already in that form are kept.

    Examples
    --------
    >>> nsys_memop_name("Memcpy DtoH (Device -> Pageable)", "memcpy")
    '[CUDA memcpy Device-to-Host]'
    >>> nsys_memop_name("Memset (Device)", "memset")
    '[CUDA memset]'
    """
    if name.startswith("[CUDA mem"):
        return name
    if kind == "memset":
        return "[CUDA memset]"
    from ..core.constants import copy_kind

    direction = _NSYS_COPY.get(copy_kind(name))
    return f"[CUDA memcpy {direction}]" if direction else "[CUDA memcpy]"


class Classifier(abc.ABC):
    """Maps distinct (name, kind, category) triples to class names; answers are memoised.

    Subclasses implement :meth:`_one`. ``label`` names the classifier in results
    (``builtin``, ``substring``, ``regex:<engine>/<model>``); ``leftover`` is the class of
    unmatched kernels.
    """

    label = "builtin"
    leftover = OTHER

    def __init__(self) -> None:
        self._memo: dict[tuple[str, str, str], str] = {}

    def classify(
        self,
        names: Iterable[str],
        kinds: Iterable[str] | None = None,
        categories: Iterable[str] | None = None,
        collectives: Iterable[str] | None = None,
    ) -> list[str]:
        """Class of each name (``kinds`` default to ``kernel``; ``categories`` to ``compute``).

        ``collectives``, when given, is the collective each communication kernel's args state
        (normalized, ``all_reduce``; ``""`` if none): it names the class of kernels whose name
        says nothing (:meth:`with_collective`). Pass distinct tuples: classification is per entry.
        """
        names = [str(n) for n in names]
        kinds = list(kinds) if kinds is not None else ["kernel"] * len(names)
        cats = list(categories) if categories is not None else ["compute"] * len(names)
        out = []
        memo = self._memo
        for key in zip(names, kinds, cats):
            cls = memo.get(key)
            if cls is None:
                cls = memo[key] = self._one(*key)
            out.append(cls)
        if collectives is not None:
            out = [
                self.with_collective(c, str(coll or "")) if cat == "comm" else c
                for c, cat, coll in zip(out, cats, collectives)
            ]
        return out

    def with_collective(self, cls: str, collective: str) -> str:
        """Class of a communication kernel of name-based class ``cls`` whose args state
        ``collective``; by default the name decides."""
        return cls

    @abc.abstractmethod
    def _one(self, name: str, kind: str, category: str) -> str:
        """Class of one distinct (name, kind, category)."""

    def is_nccl(self, classes: np.ndarray, categories: np.ndarray) -> np.ndarray:
        """Which rows belong in the per-collective (NCCL) table."""
        return cast(np.ndarray, np.asarray(categories, dtype=object) == "comm")


class BuiltinClassifier(Classifier):
    """The built-in classes (see the module docstring and :data:`BUILTIN_RULES`)."""

    label = "builtin"
    leftover = OTHER

    def __init__(self, rules: Sequence[tuple[str, str]] = tuple(BUILTIN_RULES)) -> None:
        super().__init__()
        self._rules = [(cls, re.compile(p, re.I)) for cls, p in rules]

    def with_collective(self, cls: str, collective: str) -> str:
        """``nccl_other`` (a name such as ``ncclDevKernel_Generic``) takes the args' collective.

        Examples
        --------
        >>> BuiltinClassifier().classify(["ncclDevKernel_Generic", "ncclDevKernel_Generic",
        ...     "ncclDevKernel_AllGather_RING_LL"], categories=["comm"] * 3,
        ...     collectives=["all_reduce", "", "all_reduce"])
        ['nccl_allreduce', 'nccl_other', 'nccl_allgather']
        """
        if cls == "nccl_other" and collective:
            return f"nccl_{collective_type(collective)}"
        return cls

    def _one(self, name: str, kind: str, category: str) -> str:
        if kind == "memset" or _ROCM_FILL.search(name):
            return "memset"
        if kind == "memcpy" or category == "memcpy":
            return "memcpy"
        if category == "comm":
            return f"nccl_{collective_type(name)}"
        base = kernel_identifier(name)
        for text in (base, name) if base != name else (name,):
            for cls, rx in self._rules:
                if rx.search(text):
                    return cls
        return OTHER


class SubstringMap(Classifier):
    """GPU Performance Analyser ``kernel_to_class_map`` semantics (see the module docstring)."""

    label = "substring"
    leftover = SUBSTRING_LEFTOVER

    def __init__(self, mapping: dict[str, str]) -> None:
        super().__init__()
        self.mapping = {str(k).lower(): str(v).lower() for k, v in mapping.items()}

    def _one(self, name: str, kind: str, category: str) -> str:
        if kind in ("memcpy", "memset"):
            return kind
        low = name.lower()
        if "nccl" in low:
            return SUBSTRING_NCCL
        for key, cls in self.mapping.items():
            if key in low:
                return cls
        return SUBSTRING_LEFTOVER

    def is_nccl(self, classes: np.ndarray, categories: np.ndarray) -> np.ndarray:
        return cast(np.ndarray, np.asarray(classes, dtype=object) == SUBSTRING_NCCL)


class RegexMap(Classifier):
    """gputrc2graph ordered-regex semantics (see the module docstring)."""

    leftover = REGEX_LEFTOVER

    def __init__(
        self, mapping: dict[str, str], engine: str = "", model: str = "", source: str = "<in-memory map>"
    ) -> None:
        super().__init__()
        self.label = f"regex:{engine}/{model}"
        self._rules = []
        for pattern, cls in mapping.items():
            try:
                self._rules.append((re.compile(pattern), str(cls)))
            except re.error as exc:
                raise UsageError(f"class map {source}: invalid regex {pattern!r} for {engine}/{model}: {exc}") from None

    def _one(self, name: str, kind: str, category: str) -> str:
        text = nsys_memop_name(name, kind) if kind in ("memcpy", "memset") else name
        for rx, cls in self._rules:
            if rx.search(text):
                return cls
        return REGEX_LEFTOVER


def _is_str_map(d: Any) -> bool:
    return isinstance(d, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in d.items())


def from_mapping(
    spec: Any, engine: str | None = None, model: str | None = None, source: str = "<in-memory map>"
) -> Classifier:
    """Build the classifier a loaded class map describes (format detected from its shape).

    ``{"key": "class"}`` or a config holding ``kernel_to_class_map`` → :class:`SubstringMap`;
    ``{engine: {model: {regex: category}}}`` → :class:`RegexMap` for ``engine``/``model``
    (either may be omitted when the file has only one).
    """
    if isinstance(spec, dict) and "kernel_to_class_map" in spec:
        inner = spec["kernel_to_class_map"]
        if not _is_str_map(inner):
            raise UsageError(f"class map {source}: 'kernel_to_class_map' must map name substrings to classes")
        return SubstringMap(inner)
    if _is_str_map(spec):
        return SubstringMap(spec)
    if (
        isinstance(spec, dict)
        and spec
        and all(isinstance(v, dict) and v for v in spec.values())
        and all(_is_str_map(m) for models in spec.values() for m in models.values())
    ):
        engine = _choose(sorted(spec), engine, "engine", source)
        model = _choose(list(spec[engine]), model, "model", source, f" of engine {engine!r}")
        return RegexMap(spec[engine][model], engine, model, source)
    raise UsageError(
        f'class map {source}: not a recognised format; expected {{"substring": "class"}}, '
        f'a config with "kernel_to_class_map", or {{engine: {{model: {{regex: category}}}}}}'
    )


def _choose(choices: list[str], given: str | None, what: str, source: str, where: str = "") -> str:
    if given is None:
        if len(choices) == 1:
            return choices[0]
        raise UsageError(
            f"class map {source} has several {what}s{where}: {', '.join(choices)}; "
            f"choose one with --{what} ({'classmap_' + what}=...)"
        )
    if given not in choices:
        raise UsageError(f"class map {source} has no {what} {given!r}{where}; valid: {', '.join(choices)}")
    return given


def load_classmap(spec: Any, engine: str | None = None, model: str | None = None) -> Classifier:
    """A classifier from a class-map file path or an already-loaded dict (``None``: built-in)."""
    if spec is None:
        return _builtin()
    if isinstance(spec, (str, os.PathLike)):
        path = os.fspath(spec)
        try:
            st = os.stat(path)
        except OSError as exc:
            raise UsageError(f"class map {path}: cannot read: {exc.strerror}") from None
        return _load_file(os.path.abspath(path), st.st_mtime_ns, st.st_size, engine, model)
    if isinstance(spec, dict):
        try:
            key = json.dumps(spec, sort_keys=False, default=str)
        except (RecursionError, ValueError):
            raise UsageError("the class map is nested too deeply (or refers to itself) to be a class map") from None
        return _from_json_text(key, engine, model)
    raise UsageError(f"classmap must be a file path or a dict, not {type(spec).__name__}")


@functools.lru_cache(maxsize=1)
def _builtin() -> BuiltinClassifier:
    return BuiltinClassifier()


@functools.lru_cache(maxsize=16)
def _load_file(path: str, _mtime_ns: int, _size: int, engine: str | None, model: str | None) -> Classifier:
    try:  # a FIFO or a device (/dev/zero) is refused, never read for ever
        spec = json.loads(read_regular(path, limit=MAX_CLASSMAP_BYTES).decode("utf-8"))
    except OSError as exc:
        raise UsageError(f"class map {path}: cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise UsageError(f"class map {path}: invalid JSON: {exc}") from None
    except RecursionError:
        raise UsageError(f"class map {path}: the JSON is nested too deeply to be a class map") from None
    return from_mapping(spec, engine, model, source=path)


@functools.lru_cache(maxsize=16)
def _from_json_text(text: str, engine: str | None, model: str | None) -> Classifier:
    return from_mapping(json.loads(text), engine, model)


def classifier_for(options: Any) -> Classifier:
    """The classifier an :class:`~dtrace.options.Options` asks for (cached per process)."""
    return load_classmap(options.classmap, options.classmap_engine, options.classmap_model)
