"""The :class:`Tree`: host events nested by time, launches linked to their GPU events.

A tree is built from a :class:`~dtrace.analyses.batch.Batch` (its ``host`` and ``gpu`` frames): for one
(rank, device) it is the tree users query; for a partition of many parts it is a forest whose
nodes carry their ``part``, and :meth:`Tree.ops_by_part` gives the per-op table of every part
at once. A single tree and answers the Trace2Tree questions: which node has this (external id,
pid, tid), what are its parents, children and subtree, which host op launched this kernel,
how much GPU time does an op cost. Nodes are identified by a UID, their index in the node
arrays: host nodes first, in preorder (per (pid, tid), by start, longest first), then the GPU
events by start. GPU nodes carry ``pid = device`` and ``tid = stream``, as Perfetto shows them.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from ..core.dtypes import text_column
from ..vector.groups import cummax_by, dense_codes, lexsort_ints, string_rank, unique, unique_first, unique_inverse
from . import build as B

HOST_KINDS = ("cpu_op", "annotation", "runtime")
"""Host event kinds that form the tree (``python`` joins them with ``python=True``)."""
from ..core.constants import GPU_KINDS  # noqa: E402

KINDS = ("cpu_op", "annotation", "runtime", "python", "kernel", "memcpy", "memset")
_K = {k: i for i, k in enumerate(KINDS)}
CPU_OP = _K["cpu_op"]
RUNTIME = _K["runtime"]


def _codes(col: pd.Series, vocabulary: dict[str, int]) -> np.ndarray:
    """Code of each value of a (categorical) string column in ``vocabulary`` (-1 if absent)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = np.array([vocabulary.get(str(c), -1) for c in col.cat.categories], np.int64)
        codes = col.cat.codes.to_numpy()
        return np.where(codes >= 0, cats[np.maximum(codes, 0)] if cats.size else -1, -1)
    uniq, inv = np.unique(col.astype(object).to_numpy(), return_inverse=True)
    cats = np.array([vocabulary.get(str(c), -1) for c in uniq], np.int64)
    return cats[inv] if cats.size else np.empty(0, np.int64)


def _union_names(
    host: pd.Series | None, gpu: pd.Series | None, host_rows: np.ndarray, gpu_rows: np.ndarray
) -> pd.Categorical:
    """One categorical of the host names (at ``host_rows``) followed by the GPU names (at
    ``gpu_rows``); codes are remapped, no string is built per node."""
    sides = []
    for col, rows in ((host, host_rows), (gpu, gpu_rows)):
        if col is not None:
            sides.append(
                pd.Categorical(col).take(rows)
                if isinstance(col.dtype, pd.CategoricalDtype)
                else pd.Categorical(np.asarray(col, dtype=object)[rows])
            )
    if not sides:
        return pd.Categorical(np.array([], object))
    if len(sides) == 1:
        return sides[0]
    try:
        return union_categoricals(sides)
    except TypeError:  # categories of different dtypes: fall back to the values
        return pd.Categorical(np.concatenate([np.asarray(c, dtype=object) for c in sides]))


def _col(df: pd.DataFrame, name: str, default: int = -1) -> np.ndarray:
    if name in df.columns:
        return cast(np.ndarray, df[name].to_numpy(np.int64))
    return np.full(len(df), default, np.int64)


class Tree:
    """Host → GPU call tree of one (rank, device) — or the forest of many parts.

    Build it with :meth:`from_batch` or :func:`dtrace.tree`. Node arrays are public read-only
    attributes (``parent``, ``start_ns``, ...); :attr:`nodes` shows them as a DataFrame.

    Attributes
    ----------
    n_host, n_gpu
        Host nodes are UIDs ``0 .. n_host-1``, GPU nodes ``n_host .. n_host+n_gpu-1``.
    overlaps
        Host events that start inside their parent but end after it (kept as children, see
        :mod:`dtrace.calltree.build`).
    unlinked_gpu
        GPU events whose correlation matches no launch call (they are roots).
    """

    def __init__(
        self,
        *,
        rank: int,
        device: int,
        kind: np.ndarray,
        name: pd.Categorical,
        pid: np.ndarray,
        tid: np.ndarray,
        start_ns: np.ndarray,
        end_ns: np.ndarray,
        correlation: np.ndarray,
        external_id: np.ndarray,
        seq: np.ndarray,
        row: np.ndarray,
        n_host: int,
        gpu_launch: np.ndarray,
        part: np.ndarray | None = None,
        build_rounds: int = 0,
    ) -> None:
        self.rank, self.device = int(rank), int(device)
        self.part = np.zeros(kind.size, np.int64) if part is None else np.asarray(part, np.int64)
        self.kind, self.name = kind, name
        self.pid, self.tid = pid, tid
        self.start_ns, self.end_ns = start_ns, end_ns
        self.correlation, self.external_id, self.seq, self.row = correlation, external_id, seq, row
        self.n_host = int(n_host)
        self.n_gpu = int(kind.size - n_host)
        self._name_codes = np.asarray(name.codes, np.int64)
        self.names: np.ndarray = np.asarray(name.categories, dtype=object)

        h = self.n_host
        group = B.thread_groups(self.part[:h], pid[:h], tid[:h])
        hparent, rounds = B.nest(group, start_ns[:h], end_ns[:h])
        self.build_rounds = build_rounds + rounds
        self.overlaps = int(np.count_nonzero((hparent >= 0) & (end_ns[:h] > end_ns[:h][np.maximum(hparent, 0)])))
        hdepth = B.depths(hparent)
        lv = B.levels(hdepth)
        launch = np.where(gpu_launch >= 0, gpu_launch, -1).astype(np.int64)
        self.parent = np.concatenate([hparent, launch])
        self.depth = np.concatenate(
            [hdepth, np.where(launch >= 0, hdepth[np.maximum(launch, 0)] + 1 if h else 0, 0)]
        ).astype(np.int64)
        self.subtree_end = np.concatenate([B.subtree_end(hparent, lv), np.arange(h + 1, h + self.n_gpu + 1)])
        is_op = kind[:h] == CPU_OP
        hanc = B.nearest_ancestor(hparent, is_op, lv)
        gl = np.maximum(launch, 0)
        ganc = np.where(launch >= 0, np.where(is_op[gl], gl, hanc[gl]) if h else -1, -1)
        # a launch outside every cpu_op (a top-level graph launch) is its kernels' launcher itself
        ganc = np.where((launch >= 0) & (ganc < 0), launch, ganc)
        self.launcher_op = np.concatenate([hanc, ganc]).astype(np.int64)
        self.is_launcher = is_op.copy()
        self.is_launcher[ganc[ganc >= 0]] = True
        self.unlinked_gpu = int(np.count_nonzero(launch < 0))
        self._children: tuple[np.ndarray, np.ndarray] | None = None  # built on first use
        self._fwd_bwd: pd.DataFrame | None = None

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_batch(cls, batch: Any, *, python: bool = False) -> "Tree":
        """Build the tree (forest, for several parts) of a :class:`~dtrace.analyses.batch.Batch`.

        Parameters
        ----------
        batch
            The partition; only its ``parts``, ``host`` and ``gpu`` frames are read, never modified.
        python
            Also nest ``python`` events (``python_function``); the default keeps the tree to
            ops, annotations and runtime calls, as Trace2Tree does.
        """
        kinds = dict(_K)
        if not python:
            kinds.pop("python")
        host, gpu = batch.host, batch.gpu
        hk = (
            _codes(host["kind"], {k: kinds[k] for k in kinds if k not in GPU_KINDS})
            if len(host)
            else np.empty(0, np.int64)
        )
        keep = np.flatnonzero(hk >= 0)
        hk = hk[keep]
        hpart = _col(host, "part", 0)[keep]
        hstart, hend = _col(host, "start_ns")[keep], _col(host, "end_ns")[keep]
        hpid, htid = _col(host, "pid")[keep], _col(host, "tid")[keep]
        order = B.preorder(B.thread_groups(hpart, hpid, htid), hstart, hend)
        hrow = keep[order]  # the host rows of the nodes: each column read is taken once, not the frame
        gpart = _col(gpu, "part", 0)
        gorder = lexsort_ints((_col(gpu, "row"), _col(gpu, "start_ns"), gpart)) if len(gpu) else np.empty(0, np.int64)
        gpart = gpart[gorder]
        gk = _codes(gpu["kind"], _K)[gorder] if len(gpu) else np.empty(0, np.int64)
        hcorr = _col(host, "correlation")[hrow]
        gcorr = _col(gpu, "correlation")[gorder]
        runtime = np.where(hk[order] == RUNTIME, hcorr, -1)
        launch = B.link_by_correlation(hpart[order], runtime, gpart, gcorr)
        names = _union_names(host["name"] if keep.size else None, gpu["name"] if len(gpu) else None, hrow, gorder)
        parts = batch.parts
        first = (int(parts["rank"].iloc[0]), int(parts["device"].iloc[0])) if len(parts) else (0, 0)
        return cls(
            rank=first[0],
            device=first[1],
            kind=np.concatenate([hk[order], gk]).astype(np.int8),
            name=names,
            pid=np.concatenate([hpid[order], _col(gpu, "device", first[1])[gorder]]),
            tid=np.concatenate([htid[order], _col(gpu, "stream")[gorder]]),
            start_ns=np.concatenate([hstart[order], _col(gpu, "start_ns")[gorder]]),
            end_ns=np.concatenate([hend[order], _col(gpu, "end_ns")[gorder]]),
            correlation=np.concatenate([hcorr, gcorr]),
            external_id=np.concatenate([_col(host, "external_id")[hrow], _col(gpu, "external_id")[gorder]]),
            seq=np.concatenate([_col(host, "seq")[hrow], np.full(gorder.size, -1, np.int64)]),
            row=np.concatenate([_col(host, "row")[hrow], _col(gpu, "row")[gorder]]),
            n_host=keep.size,
            gpu_launch=launch,
            part=np.concatenate([hpart[order], gpart]),
        )

    @classmethod
    def of_batch(cls, batch: Any) -> "Tree":
        """The tree of a :class:`~dtrace.analyses.batch.Batch`, built once per batch and shared by the
        analyses that read it (``ops``, ``op_perf``): kept in ``batch.meta["tree"]``."""
        tree = batch.meta.get("tree") if isinstance(getattr(batch, "meta", None), dict) else None
        if tree is None:
            tree = cls.from_batch(batch)
            if isinstance(getattr(batch, "meta", None), dict):
                batch.meta["tree"] = tree
        return tree

    # -- basic facts ----------------------------------------------------------------------
    @property
    def size(self) -> int:
        return int(self.kind.size)

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return (
            f"<dtrace.Tree rank {self.rank} device {self.device}: {self.n_host} host nodes, "
            f"{self.n_gpu} GPU nodes ({self.unlinked_gpu} unlinked), {self.overlaps} partial overlaps>"
        )

    @property
    def stats(self) -> dict[str, int]:
        """Counts that describe the build: nodes, links, overlaps, depth, graph launches."""
        h = self.n_host
        gl = self.parent[h:]
        launches = unique(gl[gl >= 0])
        per_launch = np.bincount(np.searchsorted(launches, gl[gl >= 0]), minlength=launches.size)
        return {
            "host_nodes": h,
            "gpu_nodes": self.n_gpu,
            "linked_gpu": self.n_gpu - self.unlinked_gpu,
            "unlinked_gpu": self.unlinked_gpu,
            "launches": int(launches.size),
            "multi_kernel_launches": int(np.count_nonzero(per_launch > 1)),
            "partial_overlaps": self.overlaps,
            "roots": int(np.count_nonzero(self.parent[:h] < 0)),
            "max_depth": int(self.depth.max()) if self.size else 0,
            "build_rounds": self.build_rounds,
        }

    def kind_of(self, uid: int) -> str:
        return KINDS[int(self.kind[uid])]

    def name_of(self, uid: int) -> str:
        return str(self.names[self._name_codes[uid]])

    def is_gpu(self, uid: int) -> bool:
        return uid >= self.n_host

    @property
    def nodes(self) -> pd.DataFrame:
        """All nodes as a DataFrame indexed by UID."""
        return pd.DataFrame(
            {
                "kind": pd.Categorical.from_codes(self.kind.astype(np.int64), KINDS),
                "name": pd.Categorical.from_codes(self._name_codes, self.names),
                "pid": self.pid,
                "tid": self.tid,
                "start_ns": self.start_ns,
                "end_ns": self.end_ns,
                "dur_ns": self.end_ns - self.start_ns,
                "correlation": self.correlation,
                "external_id": self.external_id,
                "seq": self.seq,
                "parent": self.parent,
                "depth": self.depth,
                "launcher_op": self.launcher_op,
                "row": self.row,
            },
            index=pd.RangeIndex(self.size, name="uid"),
        )

    # -- lookups --------------------------------------------------------------------------
    def _check(self, uid: int) -> int:
        uid = int(uid)
        if not 0 <= uid < self.size:
            raise KeyError(f"no node with UID {uid}; UIDs are 0..{self.size - 1}")
        return uid

    def find(self, external_id: int, pid: int, tid: int) -> int:
        """UID of the node with this (external id, pid, tid), as Perfetto shows them.

        An op and the runtime calls it makes share its external id; the outermost (first in
        preorder) matching node is returned. GPU events are found by (external id, device,
        stream). Raises ``KeyError`` if there is none.
        """
        hit = np.flatnonzero((self.external_id == external_id) & (self.pid == pid) & (self.tid == tid))
        if not hit.size:
            raise KeyError(f"no node with external id {external_id}, pid {pid}, tid {tid}")
        return int(hit[0])

    def by_name(self, name: str) -> np.ndarray:
        """UIDs of the nodes called ``name``, in UID order."""
        code = np.flatnonzero(self.names == name)
        if not code.size:
            return np.empty(0, np.int64)
        return np.flatnonzero(self._name_codes == code[0])

    def node(self, uid: int) -> dict[str, Any]:
        """One node as a dict (the fields of the text views: UID, kind, name, ids, times, parent, children)."""
        u = self._check(uid)
        return {
            "UID": u,
            "kind": self.kind_of(u),
            "name": self.name_of(u),
            "pid": int(self.pid[u]),
            "tid": int(self.tid[u]),
            "start_ns": int(self.start_ns[u]),
            "end_ns": int(self.end_ns[u]),
            "dur_ns": int(self.end_ns[u] - self.start_ns[u]),
            "external_id": int(self.external_id[u]),
            "correlation": int(self.correlation[u]),
            "seq": int(self.seq[u]),
            "parent": int(self.parent[u]) if self.parent[u] >= 0 else None,
            "children": self.children(u).tolist(),
            "depth": int(self.depth[u]),
            "row": int(self.row[u]),
        }

    # -- structure ------------------------------------------------------------------------
    def parent_of(self, uid: int) -> int | None:
        p = int(self.parent[self._check(uid)])
        return p if p >= 0 else None

    def children(self, uid: int) -> np.ndarray:
        """UIDs of the direct children (host calls and, for a launch, its GPU events) by start."""
        u = self._check(uid)
        if self._children is None:  # all nodes grouped by parent, each group by start (host first for ties)
            has_p = np.flatnonzero(self.parent >= 0)
            order = has_p[lexsort_ints((has_p, self.start_ns[has_p], self.parent[has_p]))]
            self._children = order, np.searchsorted(self.parent[order], np.arange(self.size + 1))
        order, ptr = self._children
        return order[ptr[u] : ptr[u + 1]]

    def ancestors(self, uid: int) -> list[int]:
        """UIDs from the parent up to the root."""
        out = []
        p = int(self.parent[self._check(uid)])
        while p >= 0:
            out.append(p)
            p = int(self.parent[p])
        return out

    def subtree(self, uid: int) -> np.ndarray:
        """UIDs of ``uid`` and all its descendants in preorder (GPU events after their launch)."""
        u = self._check(uid)
        if u >= self.n_host:
            return np.array([u], np.int64)
        host = np.arange(u, self.subtree_end[u], dtype=np.int64)
        gpu = self._gpu_under(host)
        if not gpu.size:
            return host
        uids = np.concatenate([host, gpu])
        key_owner = np.concatenate([host, self.parent[gpu]])
        key_is_gpu = np.concatenate([np.zeros(host.size, np.int8), np.ones(gpu.size, np.int8)])
        return uids[np.lexsort((self.start_ns[uids], key_is_gpu, key_owner))]

    def _gpu_under(self, host_uids: np.ndarray) -> np.ndarray:
        """GPU nodes whose launch is one of ``host_uids``."""
        if not self.n_gpu or not host_uids.size:
            return np.empty(0, np.int64)
        launches = self.parent[self.n_host :]
        return self.n_host + np.flatnonzero(np.isin(launches, host_uids))

    def launcher(self, uid: int) -> int | None:
        """The op that launched a GPU event: the first ``cpu_op`` above its launch call, else the
        launch call itself (a runtime/driver call outside every ``cpu_op``, such as a top-level
        ``cudaGraphLaunch``); for a host node, the first ``cpu_op`` above it."""
        a = int(self.launcher_op[self._check(uid)])
        return a if a >= 0 else None

    # -- GPU time -------------------------------------------------------------------------
    def gpu_events(self, uid: int, *, subtree: bool = True) -> np.ndarray:
        """GPU UIDs under a node: its whole subtree, or (``subtree=False``) its direct kernels,
        those whose launcher op (:meth:`launcher`) is this node."""
        u = self._check(uid)
        if u >= self.n_host:
            return np.array([u], np.int64)
        if subtree:
            return self._gpu_under(np.arange(u, self.subtree_end[u], dtype=np.int64))
        return self.n_host + np.flatnonzero(self.launcher_op[self.n_host :] == u)

    def gpu_time(self, uid: int, *, subtree: bool = True) -> int:
        """``|∪ GPU events|`` (ns) of :meth:`gpu_events`."""
        g = self.gpu_events(uid, subtree=subtree)
        return int(B.grouped_union(np.zeros(g.size, np.int64), self.start_ns[g], self.end_ns[g], 1)[0])

    def subtree_gpu_times(self, uid: int) -> dict[int, int]:
        """``{node: |∪ GPU events below it|}`` for every node of ``uid``'s subtree that has
        GPU events below it (one vectorised pass, for printers)."""
        u = self._check(uid)
        g = self.gpu_events(u)
        owners, gpus = [g], [g]
        anc, cur = self.parent[g], g
        while anc.size:
            owners.append(anc)
            gpus.append(cur)
            keep = (anc != u) & (self.parent[anc] >= 0)
            anc, cur = self.parent[anc[keep]], cur[keep]
        own = np.concatenate(owners)
        gg = np.concatenate(gpus)
        nodes, inv = unique_inverse(own)
        t = B.grouped_union(inv.astype(np.int64), self.start_ns[gg], self.end_ns[gg], nodes.size)
        return dict(zip(nodes.tolist(), t.tolist()))

    def _op_pairs(self) -> tuple[np.ndarray, np.ndarray, int]:
        """(op node, GPU node) pairs for every launcher above every linked GPU event — its
        launcher (:meth:`launcher`) first, then the cpu_ops above that — and the index where
        the direct pairs (launcher) end. Every linked GPU event has exactly one direct pair."""
        h = self.n_host
        g = h + np.flatnonzero(self.launcher_op[h:] >= 0)
        ops, gpus = [], []
        a = self.launcher_op[g]
        cur = g
        while a.size:
            ops.append(a)
            gpus.append(cur)
            nxt = self.launcher_op[a]
            keep = nxt >= 0
            a, cur = nxt[keep], cur[keep]
        if not ops:
            e = np.empty(0, np.int64)
            return e, e, 0
        return np.concatenate(ops), np.concatenate(gpus), int(ops[0].size)

    def launcher_kind(self, uids: np.ndarray) -> np.ndarray:
        """``cpu_op`` or ``runtime`` (a launch call outside every cpu_op) for launcher nodes."""
        return np.where(self.kind[uids] == CPU_OP, "cpu_op", "runtime").astype(object)

    def op_instances(self) -> pd.DataFrame:
        """One row per launcher node (every ``cpu_op``, and every launch call outside all
        cpu_ops that launched GPU work): uid, op, ``launcher_kind``, start, host duration, GPU
        time and kernels.

        ``gpu_direct_ns``/``kernels`` cover the GPU events this op launched itself (it is
        their launcher); ``gpu_subtree_ns``/``subtree_kernels`` those of its whole subtree.
        """
        uids = np.flatnonzero(self.is_launcher)
        op, gpu, n_direct = self._op_pairs()
        pos = np.searchsorted(uids, op)
        n = uids.size
        direct = B.grouped_union(pos[:n_direct], self.start_ns[gpu[:n_direct]], self.end_ns[gpu[:n_direct]], n)
        sub = B.grouped_union(pos, self.start_ns[gpu], self.end_ns[gpu], n)
        return pd.DataFrame(
            {
                "uid": uids,
                "op": self.names[self._name_codes[uids]].astype(object),
                "launcher_kind": self.launcher_kind(uids),
                "pid": self.pid[uids],
                "tid": self.tid[uids],
                "start_ns": self.start_ns[uids],
                "host_ns": self.end_ns[uids] - self.start_ns[uids],
                "gpu_direct_ns": direct,
                "gpu_subtree_ns": sub,
                "kernels": np.bincount(pos[:n_direct], minlength=n).astype(np.int64),
                "subtree_kernels": np.bincount(pos, minlength=n).astype(np.int64),
            }
        )

    def ops(self, window: tuple[int, int] | None = None) -> pd.DataFrame:
        """Per launcher name: count, host time, GPU time (direct and subtree) and kernel counts.

        Launchers are the ``cpu_op`` s (``launcher_kind`` ``cpu_op``) and the launch calls made
        outside every cpu_op that launched GPU work (``launcher_kind`` ``runtime``, one row per
        call name such as ``cudaGraphLaunch``), so every linked GPU event is the direct event of
        exactly one row. GPU times are unions over *all* instances of the name, so an op nested
        in an op of the same name (``aten::layer_norm`` in ``aten::layer_norm``) counts its
        kernels once, and kernels of different instances that run concurrently are not
        double-counted. ``host_ns`` is the sum of the instances' durations. ``window``
        (``start_ns, end_ns``) keeps only the instances that start inside it (one step's ops).
        """
        lo = hi = None
        if window is not None:
            n = int(self.part.max()) + 1 if self.size else 1
            lo, hi = np.full(n, window[0], np.int64), np.full(n, window[1], np.int64)
        return self.ops_by_part(lo, hi).drop(columns="part")

    def ops_by_part(self, window_start: np.ndarray | None = None, window_end: np.ndarray | None = None) -> pd.DataFrame:
        """:meth:`ops` for every part of the forest at once: one row per (part, op name).

        ``window_start``/``window_end`` (per part; a part whose start is above its end keeps all
        its ops) keep only the instances that start inside the part's window. Sorted by part,
        then subtree GPU time descending, then name.
        """
        h = self.n_host
        inside = self.is_launcher.copy()
        if window_start is not None and window_end is not None:
            p = self.part[:h]
            lo, hi = window_start[p], window_end[p]
            inside &= (lo > hi) | ((self.start_ns[:h] >= lo) & (self.start_ns[:h] < hi))
        uids = np.flatnonzero(inside)
        key_of, n_keys = dense_codes(self.part[uids], self._name_codes[uids], self.kind[uids])
        node_key = np.full(h, -1, np.int64)
        node_key[uids] = key_of
        count = np.bincount(key_of, minlength=n_keys).astype(np.int64)
        host = B.sum_by(key_of, self.end_ns[uids] - self.start_ns[uids], n_keys)
        op, gpu, n_direct = self._op_pairs()
        keep = inside[op]
        n_direct = int(np.count_nonzero(keep[:n_direct]))
        op, gpu = op[keep], gpu[keep]
        oc = node_key[op]
        direct = B.grouped_union(oc[:n_direct], self.start_ns[gpu[:n_direct]], self.end_ns[gpu[:n_direct]], n_keys)
        kernels = np.bincount(oc[:n_direct], minlength=n_keys).astype(np.int64)
        # an event under two same-named nested ops counts once for that name: the inner op's
        # pairs repeat the outer one's, so they are left out (no sort of the pairs)
        outer = ~self._nested_in_same(uids, key_of)[np.searchsorted(uids, op)]
        oc_u, gpu_u = oc[outer], gpu[outer]
        sub = B.grouped_union(oc_u, self.start_ns[gpu_u], self.end_ns[gpu_u], n_keys)
        sub_k = np.bincount(oc_u, minlength=n_keys).astype(np.int64)
        first = uids[unique_first(key_of)[1]]
        code = self._name_codes[first]
        part = self.part[first]
        # names ranked and built once per distinct name, after ordering (no string per row before)
        order = lexsort_ints((self.kind[first], string_rank(self.names)[code], -sub, part))
        first = first[order]
        return pd.DataFrame(
            {
                "part": part[order],
                "op": text_column(self.names, code[order]),
                "launcher_kind": self.launcher_kind(first),
                "count": count[order],
                "host_ns": host[order],
                "gpu_direct_ns": direct[order],
                "gpu_subtree_ns": sub[order],
                "kernels": kernels[order],
                "subtree_kernels": sub_k[order],
            }
        )

    def _nested_in_same(self, uids: np.ndarray, key_of: np.ndarray) -> np.ndarray:
        """Whether each of the launcher nodes ``uids`` (ascending, so in preorder) is a cpu_op
        inside another of them with the same key ``key_of`` (part, name, kind): every GPU event
        below it is below that one too. Same-key nodes in preorder lie inside an earlier one
        exactly when the earlier ones' subtrees, whose ends run up by key, reach past them."""
        order = np.argsort(key_of, kind="stable")
        k, node = key_of[order], uids[order]
        reach = cummax_by(k, self.subtree_end[node])
        earlier = np.empty(k.size, np.int64)
        earlier[:1] = -1
        earlier[1:] = np.where(k[1:] == k[:-1], reach[:-1], -1)
        out = np.zeros(uids.size, bool)
        out[order] = (earlier > node) & (self.kind[node] == CPU_OP)
        return out

    # -- forward / backward ---------------------------------------------------------------
    @property
    def fwd_bwd(self) -> pd.DataFrame:
        """Forward op ↔ backward op links by ``Sequence number``: columns pid, seq, fwd, bwd.

        Among the ops sharing (pid, sequence number), backward ones are named ``*Backward*``
        or ``autograd::*``; the link joins the innermost (last-starting) forward op to the
        innermost backward op, as the profiler's own ``fwdbwd`` flow events do.
        """
        if self._fwd_bwd is None:
            self._fwd_bwd = self._link_fwd_bwd()
        return self._fwd_bwd

    def _link_fwd_bwd(self) -> pd.DataFrame:
        h = self.n_host
        uids = np.flatnonzero((self.kind[:h] == CPU_OP) & (self.seq[:h] >= 0))
        cols = {"pid": np.int64, "seq": np.int64, "fwd": np.int64, "bwd": np.int64}
        if not uids.size:
            return pd.DataFrame({c: np.empty(0, t) for c, t in cols.items()})
        is_bwd_name = np.array(["Backward" in str(n) or str(n).startswith("autograd::") for n in self.names], bool)
        bwd = is_bwd_name[self._name_codes[uids]]
        f = pd.DataFrame(
            {
                "pid": self.pid[uids],
                "seq": self.seq[uids],
                "uid": uids,
                "bwd": bwd,
                "start": self.start_ns[uids],
                "neg_dur": self.start_ns[uids] - self.end_ns[uids],
            }
        )
        f = f.sort_values(["pid", "seq", "start", "neg_dur", "uid"], kind="stable")
        last = f.groupby(["pid", "seq", "bwd"], sort=True)["uid"].last().unstack("bwd")
        if True not in last.columns or False not in last.columns:
            return pd.DataFrame({c: np.empty(0, t) for c, t in cols.items()})
        last = last.dropna()
        return pd.DataFrame(
            {
                "pid": last.index.get_level_values("pid").to_numpy(np.int64),
                "seq": last.index.get_level_values("seq").to_numpy(np.int64),
                "fwd": last[False].to_numpy(np.int64),
                "bwd": last[True].to_numpy(np.int64),
            }
        )

    def is_backward(self, uid: int) -> bool:
        """Whether ``uid`` is a backward op by name (``*Backward*``, ``autograd::*``)."""
        n = self.name_of(self._check(uid))
        return "Backward" in n or n.startswith("autograd::")

    def backward_of(self, uid: int) -> int | None:
        """The backward op linked to the forward op ``uid`` (same pid and sequence number)."""
        return self._link(uid, backward=False)

    def forward_of(self, uid: int) -> int | None:
        """The forward op linked to the backward op ``uid`` (same pid and sequence number)."""
        return self._link(uid, backward=True)

    def _link(self, uid: int, *, backward: bool) -> int | None:
        u = self._check(uid)
        if self.seq[u] < 0 or self.kind[u] != CPU_OP or self.is_backward(u) != backward:
            return None
        fb = self.fwd_bwd
        hit = np.flatnonzero((fb["pid"].to_numpy() == self.pid[u]) & (fb["seq"].to_numpy() == self.seq[u]))
        if not hit.size:
            return None
        return int(fb["fwd" if backward else "bwd"].to_numpy()[hit[0]])

    # -- printing -------------------------------------------------------------------------
    def format(self, uid: int, *, depth: int | None = None, width: int = 64, times: bool = False) -> str:
        """The subtree of ``uid`` as text (``└── Category: cpu_op, Name: aten::mm``)."""
        from .printer import format_down

        return format_down(self, self._check(uid), max_depth=depth, width=width, times=times)

    def format_up(self, uid: int, *, width: int = 64) -> str:
        """``uid`` and its ancestors up to the root, one block per level (``1-up:`` ...)."""
        from .printer import format_up

        return format_up(self, self._check(uid), width=width)
