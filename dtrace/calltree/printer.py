"""Text views of a :class:`~dtrace.calltree.model.Tree`, in the Trace2Tree seed's style.

Down (a node and its subtree)::

    └── Category: cpu_op, Name: aten::layer_norm
        └── Category: cpu_op, Name: aten::native_layer_norm
            ├── Category: cpu_op, Name: aten::empty
            ├── Category: runtime, Name: cudaLaunchKernel
            │   └── Category: kernel, Name: void at::native::(anonymous namespace)::vectorized_layer_norm_ke...
            └── Category: cpu_op, Name: aten::view

Up (a node and its ancestors)::

    Node:
      cat: kernel
      name: void at::native::...
    1-up:
      cat: runtime
      name: cudaLaunchKernel

Categories are dtrace's event kinds (``cpu_op``, ``annotation``, ``runtime``, ``python``,
``kernel``, ``memcpy``, ``memset``). Renderers return strings; only the CLI prints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .model import Tree


def cut(name: str, width: int) -> str:
    """``name`` cut to ``width`` characters plus ``...`` (the text views' truncation)."""
    return name if width <= 0 or len(name) <= width else name[:width] + "..."


def _us(ns: int) -> str:
    return f"{ns / 1e3:,.3f} µs"


def label(tree: "Tree", uid: int, width: int = 64, gpu_ns: dict[int, int] | None = None) -> str:
    """``Category: KIND, Name: NAME``; with ``gpu_ns`` (node → GPU time below it) also the
    host duration and, for host nodes with GPU work below, the GPU time."""
    text = f"Category: {tree.kind_of(uid)}, Name: {cut(tree.name_of(uid), width)}"
    if gpu_ns is not None:
        text += f", Dur: {_us(int(tree.end_ns[uid] - tree.start_ns[uid]))}"
        if uid < tree.n_host and uid in gpu_ns:
            text += f", GPU: {_us(gpu_ns[uid])}"
    return text


def format_down(tree: "Tree", uid: int, *, max_depth: int | None = None, width: int = 64, times: bool = False) -> str:
    """The subtree of ``uid``, ``max_depth`` levels below it at most (None: all)."""
    lines: list[str] = []
    gpu_ns = tree.subtree_gpu_times(uid) if times else None
    # stack of (uid, prefix for this line, prefix for its children, level)
    stack = [(uid, "└── ", "    ", 0)]
    while stack:
        u, pre, child_pre, level = stack.pop()
        lines.append(pre + label(tree, u, width, gpu_ns))
        kids = tree.children(u)
        if not kids.size:
            continue
        if max_depth is not None and level >= max_depth:
            below = _count_below(tree, u)
            lines.append(child_pre + f"└── … {below} node{'s' if below != 1 else ''} below")
            continue
        for i in range(kids.size - 1, -1, -1):
            last = i == kids.size - 1
            stack.append(
                (
                    int(kids[i]),
                    child_pre + ("└── " if last else "├── "),
                    child_pre + ("    " if last else "│   "),
                    level + 1,
                )
            )
    return "\n".join(lines) + "\n"


def _count_below(tree: "Tree", uid: int) -> int:
    return int(tree.subtree(uid).size - 1)


def format_up(tree: "Tree", uid: int, *, width: int = 64) -> str:
    """``uid`` and every ancestor, one ``k-up:`` block each."""
    lines = ["Node:", f"  cat: {tree.kind_of(uid)}", f"  name: {cut(tree.name_of(uid), width)}"]
    for k, a in enumerate(tree.ancestors(uid), start=1):
        lines += [f"{k}-up:", f"  cat: {tree.kind_of(a)}", f"  name: {cut(tree.name_of(a), width)}"]
    return "\n".join(lines) + "\n"
