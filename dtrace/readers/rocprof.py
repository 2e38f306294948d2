"""rocprofv3 (ROCprofiler-SDK) JSON: ``<host>/<pid>_results.json`` (``--output-format json``).

The document is ``{"rocprofiler-sdk-tool": [process]}`` (detected by that key); a process holds
``metadata`` (``pid``, ``init_time``/``fini_time``, ``node.hostname``), ``agents`` (CPU and GPU
agents by ``id.handle``; a GPU agent's ``gpu_index`` is its device id, ``product_name`` its
name), ``kernel_symbols`` (``kernel_id`` → ``formatted_kernel_name``), ``strings`` (the
operation names of every record kind, ``strings.buffer_records[kind].operations[operation]``,
and the roctx messages by correlation id, ``strings.marker_api``) and ``buffer_records``:

- ``kernel_dispatch`` → ``kernel`` on the device of ``dispatch_info.agent_id``, stream the HIP
  stream (``stream_id.handle``; the HSA queue ``dispatch_info.queue_id`` where the records carry
  no stream), grid and workgroup sizes in the extra columns ``grid_x/y/z`` and ``block_x/y/z``;
- ``memory_copy`` → ``memcpy`` on the GPU agent it involves (the destination of a host-to-device
  copy, else the source), its direction (``MEMORY_COPY_HOST_TO_DEVICE`` → ``H2D``; device to
  device between two agents → ``P2P``) and ``bytes`` in the memcpy side table; a copy between two
  host agents involves no GPU and is a host event of kind ``other``;
- ``hip_api`` → ``runtime`` (``hipLaunchKernel``, ``hipMemcpyAsync``, ...), linked to the GPU
  work it launched by ``correlation_id.internal``; ``rccl_api`` → ``cpu_op`` (``ncclAllReduce``);
- ``marker_api`` → ``annotation`` named by the roctx message (ranges, marks; ``ProfilerStep#N``
  ranges become steps).

Timestamps are integer ns of the host's monotonic clock (not the epoch). RCCL kernels
(``ncclDevKernel_*``) are communication and rows of the collectives side table. A process
driving several GPUs gives one part per GPU, each with the process's host records. The
profiling session (``init_time`` to ``fini_time``) is kept in ``meta["session_ns"]``:
TraceLens measures the total time of a rocprofv3 trace over it (``--compat tracelens``).
The file states no rank: give ranks by file name (``rank3_results.json``), ``--rank-by order``
or ``ranks=``.
"""

from __future__ import annotations

import functools
import operator
from typing import Annotated, Any

import msgspec
import numpy as np
import pyarrow as pa

from ..core.constants import COMM_KERNEL, KIND_CODES, kernel_collective
from ..core.schema import (
    COLLECTIVE_SCHEMA,
    KIND_DICT,
    MEMCPY_SCHEMA,
    dropped_summary,
    implausible_times,
    side_table,
    validate_events,
)
from ..errors import ImplausibleTimes, InputError, NoGPUActivity
from ..vector.groups import text_codes
from ._io import read_content
from ._op_args import device_row, vendor_of
from .base import Part, TraceFile

NAME = "rocprofv3"
KEY = b'"rocprofiler-sdk-tool"'
GRID_COLUMNS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
"""Extra int64 columns of a rocprofv3 event table: a dispatch's grid and workgroup sizes (work
items per dimension, as rocprofv3 records them; -1 for other events)."""

COPY_DIRECTION = {
    "MEMORY_COPY_HOST_TO_HOST": "H2H",
    "MEMORY_COPY_HOST_TO_DEVICE": "H2D",
    "MEMORY_COPY_DEVICE_TO_HOST": "D2H",
    "MEMORY_COPY_DEVICE_TO_DEVICE": "D2D",
}
GPU_AGENT = 2  # rocprofiler_agent_type_t: 1 CPU, 2 GPU
MAX_DEVICE = 2**31 - 1
"""Device ids are 0 to this - 1 (the event table's device column is int32; -1 is the host)."""
_I64_MAX = (1 << 63) - 1
Int = Annotated[int, msgspec.Meta(ge=-_I64_MAX - 1, le=_I64_MAX)]
"""An integer the event columns can hold (int64); rocprofv3 writes uint64 ids and times, and one
beyond int64 fails the file in one line naming where it is."""


class _Handle(msgspec.Struct, gc=False, frozen=True):
    handle: Int = 0


class _Corr(msgspec.Struct, gc=False, frozen=True):
    internal: Int = 0
    external: Any = 0  # an int, or {"value": int} in some versions


class _Dim(msgspec.Struct, gc=False, frozen=True):
    x: Int = 0
    y: Int = 0
    z: Int = 0


_NO_HANDLE, _NO_CORR, _NO_DIM = _Handle(), _Corr(), _Dim()


class _DispatchInfo(msgspec.Struct, gc=False, frozen=True):
    agent_id: _Handle = _NO_HANDLE
    queue_id: _Handle = _NO_HANDLE
    kernel_id: Int = 0
    workgroup_size: _Dim = _NO_DIM
    grid_size: _Dim = _NO_DIM


class _Dispatch(msgspec.Struct, gc=False, frozen=True):
    thread_id: Int = 0
    correlation_id: _Corr = _NO_CORR
    start_timestamp: Int = 0
    end_timestamp: Int = 0
    dispatch_info: _DispatchInfo = _DispatchInfo()
    stream_id: _Handle | None = None


class _Api(msgspec.Struct, gc=False, frozen=True):
    kind: Int = 0
    operation: Int = 0
    thread_id: Int = 0
    correlation_id: _Corr = _NO_CORR
    start_timestamp: Int = 0
    end_timestamp: Int = 0


class _Copy(_Api, gc=False, frozen=True):
    """A memory copy record: an API record's fields, then the copy's own."""

    dst_agent_id: _Handle = _NO_HANDLE
    src_agent_id: _Handle = _NO_HANDLE
    bytes: Int = 0
    stream_id: _Handle | None = None


class _Buffers(msgspec.Struct, gc=False, frozen=True):
    kernel_dispatch: list[_Dispatch] = []
    memory_copy: list[_Copy] = []
    hip_api: list[_Api] = []
    marker_api: list[_Api] = []
    rccl_api: list[_Api] = []


class _Names(msgspec.Struct, gc=False, frozen=True):
    kind: str = ""
    operations: list[str] = []


class _Message(msgspec.Struct, gc=False, frozen=True):
    key: Int = 0
    value: str = ""


class _Strings(msgspec.Struct, gc=False, frozen=True):
    buffer_records: list[_Names] = []
    marker_api: list[_Message] = []


class _Agent(msgspec.Struct, gc=False, frozen=True):
    id: _Handle = _NO_HANDLE
    type: Int = 0
    gpu_index: Int = -1
    logical_node_type_id: Int = -1
    name: str = ""
    product_name: str = ""
    vendor_name: str = ""
    gfx_target_version: Int = 0
    cu_count: Int = 0
    wave_front_size: Int = 0
    local_mem_size: Int = 0


class _Symbol(msgspec.Struct, gc=False, frozen=True):
    kernel_id: Int = 0
    kernel_name: str = ""
    formatted_kernel_name: str = ""
    demangled_kernel_name: str = ""


class _Node(msgspec.Struct, gc=False, frozen=True):
    hostname: str = ""


class _Metadata(msgspec.Struct, gc=False, frozen=True):
    pid: Int = -1
    init_time: Int = -1
    fini_time: Int = -1
    node: _Node = _Node()


class _Process(msgspec.Struct, gc=False, frozen=True):
    metadata: _Metadata = _Metadata()
    agents: list[_Agent] = []
    strings: _Strings = _Strings()
    kernel_symbols: list[_Symbol] = []
    buffer_records: _Buffers = _Buffers()


class _Document(msgspec.Struct, gc=False, frozen=True):
    processes: list[_Process] | None = msgspec.field(default=None, name="rocprofiler-sdk-tool")


_DECODER = msgspec.json.Decoder(_Document)


class READER:  # noqa: N801 - the registered reader object
    name = NAME

    @staticmethod
    def guess_can_open(path: str, head: bytes) -> bool:
        return head.lstrip().startswith(b"{") and KEY in head

    @staticmethod
    def read(path: str, **options: Any) -> TraceFile:
        return read_rocprof(path, **options)


def read_rocprof(path: str, *, max_input_size: int | None = None, **_: Any) -> TraceFile:
    """Read one rocprofv3 JSON file into one :class:`Part` per GPU agent with activity.

    Events with implausible times (an end before the start) are dropped and counted in
    ``meta["dropped_events"]``.
    """
    text, fingerprint = read_content(path, max_size=max_input_size)
    try:
        doc = _DECODER.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InputError(path, f"invalid rocprofv3 JSON: {exc}") from None
    del text
    procs = doc.processes
    if not procs:
        raise InputError(path, "'rocprofiler-sdk-tool' holds no process")
    if len(procs) > 1:
        raise InputError(
            path, f"'rocprofiler-sdk-tool' holds {len(procs)} processes; dtrace reads one process per file"
        )
    proc = procs[0]
    md = proc.metadata
    session = (int(md.init_time), int(md.fini_time)) if 0 <= md.init_time <= md.fini_time else None
    return trace_file(
        path,
        _Events(proc, path),
        fmt=NAME,
        session=session,
        meta={"fingerprint": fingerprint, "hostname": md.node.hostname, "pid": int(md.pid)},
        missing="the rocprofv3 file has no kernel_dispatch or memory_copy records",
    )


def trace_file(
    path: str, events: "EventColumns", *, fmt: str, session: tuple[int, int] | None, meta: dict[str, Any], missing: str
) -> TraceFile:
    """The :class:`TraceFile` of one process's records (shared by the rocprofv3 JSON and rocpd
    readers): implausible times dropped and counted, one part per GPU with the host records.
    ``missing`` says what a file without GPU records lacks."""
    table = events.table()
    start = table.column("start_ns").to_numpy()
    end = table.column("end_ns").to_numpy()
    keep, dropped = implausible_times(start.astype(np.float64), (end - start).astype(np.float64), path)
    kinds = events.kind
    is_gpu = np.isin(kinds, [KIND_CODES["kernel"], KIND_CODES["memcpy"]])
    n_gpu = int(is_gpu.sum())
    if keep is not None:
        table = table.filter(pa.array(keep))
        kinds, is_gpu = kinds[keep], is_gpu[keep]
        events.keep(np.flatnonzero(keep))
    table = validate_events(table, path)
    device = table.column("device").to_numpy()
    devices = sorted(set(np.unique(device[is_gpu]).tolist()))
    if not devices:
        if dropped and n_gpu:
            raise ImplausibleTimes(path, f"all {n_gpu} GPU records have implausible times ({dropped_summary(dropped)})")
        raise NoGPUActivity(
            path,
            f"no GPU activity: {missing} ({table.num_rows} host records); trace with --kernel-trace / --memory-copy-trace",
        )
    meta = {
        "events": table.num_rows,
        "dropped_events": dropped,
        "base_time_ns": 0,
        "session_ns": list(session) if session is not None else None,
        "device_names": [events.device_names.get(d, "") for d in devices],
        **meta,
    }
    host = device == -1
    parts = []
    for idx, dev in enumerate(devices):
        rows = np.flatnonzero(host | (device == dev))
        parts.append(
            Part(
                device=int(dev),
                events=table.take(pa.array(rows)),
                collectives=events.collectives(rows),
                memcpy=events.memcpy(rows),
                local_index=idx,
                side={"devices": events.device_tables[dev]} if dev in events.device_tables else {},
            )
        )
    return TraceFile(path=path, format=fmt, parts=parts, rank_hint=None, meta=meta)


def _agent_device(a: _Agent, device: int) -> pa.Table:
    """The ``devices`` table of a GPU agent: its product name ("AMD Instinct MI350X"), vendor, gfx
    version as ``major.minor`` (``gfx_target_version`` 90500 → 9.5), compute units, local memory."""
    name = a.product_name or a.name
    v = a.gfx_target_version
    cap = f"{v // 10000}.{(v // 100) % 100}" if 0 < v < 1_000_000 else ""
    vendor = vendor_of(name, a.wave_front_size) or ("amd" if a.vendor_name.strip().upper() == "AMD" else "")
    return device_row(device, name, vendor, cap, a.cu_count, a.local_mem_size)


_get = operator.attrgetter
_NOT_NONE = functools.partial(operator.is_not, None)


def _ints(items: list[Any], get: Any) -> np.ndarray:
    return np.fromiter(map(get, items), np.int64, len(items))


def _external(v: Any) -> int:
    """``correlation_id.external``: an int or ``{"value": int}``; -1 when unset (0) or not an int64.

    Examples
    --------
    >>> _external(5), _external({"value": 7}), _external(0), _external("x"), _external(1 << 64)
    (5, 7, -1, -1, -1)
    """
    if isinstance(v, dict):
        v = v.get("value", 0)
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= _I64_MAX else -1


def _externals(corr: list[_Corr]) -> np.ndarray:
    """:func:`_external` of every record: in one pass when all are plain ints (the usual case)."""
    ext = list(map(_get("external"), corr))
    if set(map(type, ext)) <= {int}:
        try:
            v = np.fromiter(ext, np.int64, len(ext))
        except OverflowError:  # beyond int64: one by one below
            pass
        else:
            return np.where(v > 0, v, -1)
    return np.fromiter(map(_external, ext), np.int64, len(ext))


class EventColumns:
    """One process's records as event columns (``device``, ``stream``, ``tid``, ``kind``, ``name``
    codes into :attr:`names`, ``start``, ``end``, ``correlation``, ``external_id``, the grid
    columns, ``copy_kind``, ``bytes``, ``collective``), and the tables built from them."""

    def __init__(self, path: str, pid: int) -> None:
        self.path = path
        self.pid = pid
        self._names: dict[str, int] = {}
        self.device_of: dict[int, int] = {}  # GPU agent id -> device
        self.device_tables: dict[int, pa.Table] = {}  # device -> its devices table (from its agent)
        self.host_agents: set[int] = set()  # the other agents (CPUs)
        self.agents_source = "the 'agents' list"  # where the agents come from, for error messages
        self.device_names: dict[int, str] = {}
        self.cols: dict[str, np.ndarray] = {}
        self.kind = np.empty(0, np.int8)
        self.rows = np.empty(0, np.int64)

    def set_columns(self, parts: list[dict[str, np.ndarray]]) -> None:
        self.cols = {k: np.concatenate([c[k] for c in parts]) for k in parts[0]}
        self.kind = self.cols["kind"]
        self.rows = np.arange(len(self.kind), dtype=np.int64)

    def base(self, n: int, kind: str) -> dict[str, np.ndarray]:
        """Columns of ``n`` records of ``kind`` with every value unknown (-1, "")."""
        minus = np.full(n, -1, np.int64)
        return {
            "device": minus.copy(),
            "stream": minus.copy(),
            "tid": minus.copy(),
            "kind": np.full(n, KIND_CODES[kind], np.int8),
            "name": np.zeros(n, np.int64),
            "start": np.zeros(n, np.int64),
            "end": np.zeros(n, np.int64),
            "correlation": minus.copy(),
            "external_id": minus.copy(),
            **{c: minus.copy() for c in GRID_COLUMNS},
            "copy_kind": np.full(n, "", object),
            "bytes": minus.copy(),
            "collective": np.full(n, "", object),
        }

    def code(self, name: str) -> int:
        """The dictionary code of a name."""
        got = self._names.get(name)
        if got is None:
            got = self._names[name] = len(self._names)
        return got

    def codes(self, names: list[str]) -> np.ndarray:
        return np.array([self.code(n) for n in names], np.int64)

    def device_id(self, dev: int, what: str) -> int:
        """``dev`` if it is a device id (0 to 2**31 - 2); an id the int32 device column cannot hold
        (2**32 would wrap to device 0 and merge two GPUs, 2**32 - 1 to -1, the host) is an input
        error."""
        if not 0 <= dev < MAX_DEVICE:
            raise InputError(
                self.path, f"{what} has device index {dev}, which is not a device id (0 to {MAX_DEVICE - 1:,})"
            )
        return int(dev)

    def devices(self, agents: np.ndarray, what: str) -> np.ndarray:
        """The device of each GPU agent id; an agent that is not a known GPU is an input error."""
        uniq, inv = np.unique(agents, return_inverse=True)
        missing = [int(h) for h in uniq.tolist() if h not in self.device_of]
        if missing:
            raise InputError(
                self.path, f"{what} on agent {missing[0]}, which is not a GPU agent of {self.agents_source}"
            )
        return np.array([self.device_of[int(h)] for h in uniq.tolist()], np.int64)[inv.reshape(-1)]

    def copy_columns(
        self, c: dict[str, np.ndarray], op: np.ndarray, dst: np.ndarray, src: np.ndarray, stream: np.ndarray
    ) -> None:
        """Device, stream, direction and name code of memory copies from their operation names,
        agents and streams. A copy between two host agents involves no GPU: a host event of kind
        ``other`` (device and stream -1)."""
        gpus, hosts = list(self.device_of), list(self.host_agents)
        host = ~(np.isin(dst, gpus) | np.isin(src, gpus)) & np.isin(dst, hosts) & np.isin(src, hosts)
        use_dst = np.isin(dst, gpus) & ((op == "MEMORY_COPY_HOST_TO_DEVICE") | ~np.isin(src, gpus))
        c["device"] = np.full(op.size, -1, np.int64)
        c["device"][~host] = self.devices(np.where(use_dst, dst, src)[~host], "a memory copy")
        c["kind"] = np.where(host, KIND_CODES["other"], c["kind"]).astype(np.int8)
        c["stream"] = np.where(host, -1, stream)
        names, inv = text_codes(op)
        c["name"] = self.codes(names)[inv]
        direction = np.array([COPY_DIRECTION.get(n, "other") for n in names], object)[inv]
        c["copy_kind"] = np.where((direction == "D2D") & (dst != src), "P2P", direction)

    def kernel_names(self, c: dict[str, np.ndarray], names: list[str], inv: np.ndarray) -> None:
        """Name codes and collective types of kernels, given their distinct names and each one's index."""
        c["name"] = self.codes(names)[inv]
        coll = np.array([kernel_collective(n) if COMM_KERNEL.search(n) else "" for n in names], object)
        c["collective"] = coll[inv]

    # -- outputs ----------------------------------------------------------------------------
    def keep(self, rows: np.ndarray) -> None:
        """Keep only these rows (events with plausible times)."""
        self.rows = self.rows[rows]
        self.kind = self.kind[rows]

    def table(self) -> pa.Table:
        c = self.cols
        n = len(c["kind"])
        names = list(self._names)
        return pa.table(
            {
                "rank": np.full(n, -1, np.int32),
                "device": c["device"].astype(np.int32),
                "stream": c["stream"],
                "pid": np.full(n, self.pid, np.int64),
                "tid": c["tid"],
                "kind": pa.DictionaryArray.from_arrays(pa.array(c["kind"].astype(np.int32)), KIND_DICT),
                "name": pa.DictionaryArray.from_arrays(
                    pa.array(c["name"].astype(np.int32)), pa.array(names or [""], pa.string())
                ),
                "start_ns": c["start"],
                "end_ns": c["end"],
                "correlation": c["correlation"],
                "external_id": c["external_id"],
                **{col: c[col] for col in GRID_COLUMNS},
            }
        )

    def collectives(self, part_rows: np.ndarray) -> pa.Table:
        """The collectives side table of a part (its rows index the kept events): RCCL kernels."""
        coll = self.cols["collective"][self.rows[part_rows]]
        at = np.flatnonzero(coll != "")
        return side_table(COLLECTIVE_SCHEMA, {"row": at, "collective": coll[at].tolist()})

    def memcpy(self, part_rows: np.ndarray) -> pa.Table:
        """The memcpy side table of a part: direction and bytes of its copies."""
        src = self.rows[part_rows]
        at = np.flatnonzero(self.cols["kind"][src] == KIND_CODES["memcpy"])
        return pa.table(
            {
                "row": pa.array(at.astype(np.int64), pa.int64()),
                "copy_kind": pa.array(self.cols["copy_kind"][src[at]].tolist(), pa.string()).dictionary_encode(),
                "bytes": pa.array(self.cols["bytes"][src[at]], pa.int64()),
            }
        ).cast(MEMCPY_SCHEMA)


class _Events(EventColumns):
    """The records of one rocprofv3 JSON process, built source by source (kernels, copies, HIP
    API, RCCL API, markers)."""

    def __init__(self, proc: _Process, path: str) -> None:
        super().__init__(path, int(proc.metadata.pid))
        self._agents(proc.agents)
        ops = [n.operations for n in proc.strings.buffer_records]
        br = proc.buffer_records
        cols: list[dict[str, np.ndarray]] = []
        cols.append(self._kernels(br.kernel_dispatch, proc.kernel_symbols))
        cols.append(self._copies(br.memory_copy, ops))
        messages = {m.key: m.value for m in proc.strings.marker_api}
        for records, kind in ((br.hip_api, "runtime"), (br.rccl_api, "cpu_op"), (br.marker_api, "annotation")):
            cols.append(self._api(records, ops, kind, messages if kind == "annotation" else None))
        self.set_columns(cols)

    # -- sources ----------------------------------------------------------------------------
    def _agents(self, agents: list[_Agent]) -> None:
        gpus = [a for a in agents if a.type == GPU_AGENT]
        self.host_agents = {a.id.handle for a in agents if a.type != GPU_AGENT}
        for i, a in enumerate(gpus):
            dev = a.gpu_index if a.gpu_index >= 0 else a.logical_node_type_id if a.logical_node_type_id >= 0 else i
            self.device_of[a.id.handle] = self.device_id(dev, f"GPU agent {a.id.handle}")
            self.device_names[dev] = a.product_name or a.name
            self.device_tables[dev] = _agent_device(a, dev)

    def _common(self, c: dict[str, np.ndarray], records: list[Any]) -> None:
        corr = list(map(_get("correlation_id"), records))
        c["tid"] = _ints(records, _get("thread_id"))
        c["start"] = _ints(records, _get("start_timestamp"))
        c["end"] = _ints(records, _get("end_timestamp"))
        c["correlation"] = _ints(corr, _get("internal"))
        c["external_id"] = _externals(corr)

    def _kernels(self, ds: list[_Dispatch], symbols: list[_Symbol]) -> dict[str, np.ndarray]:
        c = self.base(len(ds), "kernel")
        if not ds:
            return c
        self._common(c, ds)
        info = list(map(_get("dispatch_info"), ds))
        c["device"] = self.devices(_ints(info, _get("agent_id.handle")), "a kernel dispatch")
        streams = list(map(_get("stream_id"), ds))
        has = np.fromiter(map(_NOT_NONE, streams), bool, len(streams))
        if has.all():  # the HIP stream
            c["stream"] = _ints(streams, _get("handle"))
        else:  # the HSA queue for records without one
            c["stream"] = _ints(info, _get("queue_id.handle"))
            c["stream"][has] = _ints([streams[i] for i in np.flatnonzero(has).tolist()], _get("handle"))
        for col, get in zip(
            GRID_COLUMNS,
            ("grid_size.x", "grid_size.y", "grid_size.z", "workgroup_size.x", "workgroup_size.y", "workgroup_size.z"),
        ):
            c[col] = _ints(info, _get(get))
        kid = _ints(info, _get("kernel_id"))
        names = {s.kernel_id: s.formatted_kernel_name or s.demangled_kernel_name or s.kernel_name for s in symbols}
        uniq, inv = np.unique(kid, return_inverse=True)
        missing = [int(k) for k in uniq.tolist() if k not in names]
        if missing:
            raise InputError(self.path, f"a kernel dispatch names kernel_id {missing[0]}, which kernel_symbols lacks")
        self.kernel_names(c, [names[int(k)] for k in uniq.tolist()], inv.reshape(-1))
        return c

    def _op_names(self, records: list[_Copy] | list[_Api], ops: list[list[str]]) -> tuple[np.ndarray, list[str]]:
        """Each record's operation name (``strings.buffer_records[kind].operations[operation]``)
        as an index into the returned distinct names."""
        key = _ints(records, _get("kind")) * (1 << 20) + _ints(records, _get("operation"))
        uniq, inv = np.unique(key, return_inverse=True)
        out = []
        for k in uniq.tolist():
            kind, op = divmod(int(k), 1 << 20)
            names = ops[kind] if 0 <= kind < len(ops) else []
            out.append(names[op] if 0 <= op < len(names) else f"kind {kind} operation {op}")
        return inv.reshape(-1), out

    def _copies(self, cs: list[_Copy], ops: list[list[str]]) -> dict[str, np.ndarray]:
        c = self.base(len(cs), "memcpy")
        if not cs:
            return c
        self._common(c, cs)
        inv, op_names = self._op_names(cs, ops)
        op = np.array(op_names, object)[inv]
        streams = list(map(_get("stream_id"), cs))
        stream = np.fromiter((-2 if s is None else s.handle for s in streams), np.int64, len(cs))
        self.copy_columns(c, op, _ints(cs, _get("dst_agent_id.handle")), _ints(cs, _get("src_agent_id.handle")), stream)
        c["bytes"] = _ints(cs, _get("bytes"))
        return c

    def _api(
        self, records: list[_Api], ops: list[list[str]], kind: str, messages: dict[int, str] | None
    ) -> dict[str, np.ndarray]:
        c = self.base(len(records), kind)
        if not records:
            return c
        self._common(c, records)
        inv, op_names = self._op_names(records, ops)
        codes = np.array([self.code(n) for n in op_names], np.int64)[inv]
        if messages:  # a marker's roctx message, by its correlation id
            named = [messages.get(k) for k in c["correlation"].tolist()]
            codes = np.fromiter(
                (code if m is None else self.code(m) for m, code in zip(named, codes.tolist())), np.int64, len(codes)
            )
        c["name"] = codes
        return c
