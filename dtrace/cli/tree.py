"""``dtrace tree TRACE ...``, ``dtrace ops X`` and ``dtrace sequences X``: the host op → GPU
kernel tree quick views.

``tree`` prints one node's subtree (or, with ``--up``, its ancestors) in the Trace2Tree
style; ``ops`` prints GPU time per host op, from one trace or from a results directory
(cross-rank ``ops_xrank``, or one rank's ``ops`` with ``--rank``); ``sequences`` prints the
kernel sequences top-level ops launch (HTA's frequent CUDA kernel sequences), from one trace or
a results directory (``kernel_sequences_xrank``, or one rank's ``kernel_sequences``).
"""

from __future__ import annotations

import argparse
import difflib
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..options import Options
from ..render.escape import printable
from .common import (
    COUNT,
    DEVICE,
    ID,
    RANK,
    add_output_format,
    add_rows,
    option_number,
    reading,
    rows_to_show,
    whole,
)

if TYPE_CHECKING:
    from ..calltree import Tree

OPS_SORT = ("gpu_subtree_ns", "gpu_direct_ns", "host_ns", "count", "kernels")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tree",
        help="print the host op -> GPU kernel tree of one op",
        description="Print a node of the host -> GPU tree of one trace: its subtree (down) or its "
        "ancestors (--up). Pick the node by op name (--op), by the (external id, pid, "
        "tid) Perfetto shows (--ext-id/--pid/--tid; GPU events: pid = device, tid = "
        "stream) or by UID.",
    )
    p.add_argument(
        "trace", metavar="TRACE", help="a trace file, a directory of traces (with --rank) or a results directory"
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--op", default=None, help="op (or any event) name")
    which.add_argument("--ext-id", type=ID, default=None, help="external id (with --pid and --tid)")
    which.add_argument("--uid", type=COUNT, default=None, help="node UID")
    p.add_argument("--pid", type=ID, default=None)
    p.add_argument("--tid", type=ID, default=None)
    p.add_argument("--nth", type=COUNT, default=0, help="with --op: which instance, in UID order (default 0)")
    p.add_argument("--up", action="store_true", help="print the node's ancestors instead of its subtree")
    p.add_argument("--depth", type=COUNT, default=None, help="print at most N levels below the node")
    p.add_argument("--rank", type=RANK, default=None, help="rank to open (traces directory or results)")
    p.add_argument("--device", type=DEVICE, default=None, help="GPU device (default: the first)")
    p.add_argument("--python", action="store_true", help="also nest python_function events")
    p.add_argument("--times", action="store_true", help="show host durations and GPU time per node")
    p.add_argument(
        "--width", type=whole(0, 1_000_000), default=64, help="cut names after this many characters (0: never)"
    )
    p.add_argument(
        "--cache", default=None, metavar="DIR", help="of a results directory: its ingest cache (default: OUT/cache)"
    )
    p.set_defaults(func=run_tree)

    o = sub.add_parser(
        "ops",
        help="GPU time per host op (one trace, or across ranks)",
        description="GPU time per host op: gpu_direct (kernels the op launched itself) and "
        "gpu_subtree (everything below it). X is a trace file or a results directory; "
        "for a results directory the cross-rank table is shown unless --rank is given.",
    )
    o.add_argument("x", metavar="X", help="a trace file or a results directory")
    add_rows(o)
    o.add_argument("--sort", choices=OPS_SORT, default="gpu_subtree_ns", help="sort column (descending)")
    o.add_argument("--rank", type=RANK, default=None, help="one rank's ops")
    o.add_argument("--device", type=DEVICE, default=None, help="GPU device (default: the first)")
    o.add_argument("--raw", action="store_true", help="keep *_ns columns in ns")
    add_output_format(o)
    o.set_defaults(func=run_ops)
    add_sequences_parser(sub)


def add_sequences_parser(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser(
        "sequences",
        help="the kernel sequences top-level ops launch, most frequent first (fusion candidates)",
        description="The sequences of GPU kernels that top-level host ops (no cpu_op above them) launch, "
        "with how often each op launched each sequence and the GPU and host time: HTA's frequent CUDA "
        "kernel sequences, for every op (or those whose name contains --op). X is a trace file or a "
        "results directory; for a results directory the counts over all ranks are shown unless --rank is "
        "given. Sorted by count (largest first), then op and sequence. "
        "Definition: docs/semantics.md, 'Host op tree and ops' (Kernel sequences).",
    )
    s.add_argument("x", metavar="X", help="a trace file or a results directory")
    s.add_argument("--op", default=None, metavar="NAME", help="only ops whose name contains NAME (HTA's operator_name)")
    s.add_argument(
        "--min-len",
        type=option_number("sequence_min_len"),
        default=None,
        metavar="N",
        help="only sequences of at least N kernels (default: all the table holds; "
        f"dtrace analyze keeps those of {Options().sequence_min_len} or more, --sequence-min-len)",
    )
    s.add_argument("--rank", type=RANK, default=None, help="one rank's sequences")
    s.add_argument("--device", type=DEVICE, default=None, help="GPU device (default: every one of the rank)")
    add_rows(s)
    s.add_argument("--raw", action="store_true", help="keep *_ns columns in ns")
    add_output_format(s)
    s.set_defaults(func=run_sequences)


def _pick(tree: Tree, args: argparse.Namespace) -> int:
    if args.uid is not None:
        if not 0 <= args.uid < tree.size:
            raise UsageError(f"no node with UID {args.uid}; UIDs are 0..{tree.size - 1}")
        return args.uid
    if args.ext_id is not None:
        if args.pid is None or args.tid is None:
            raise UsageError("--ext-id needs --pid and --tid")
        try:
            return tree.find(args.ext_id, args.pid, args.tid)
        except KeyError as exc:
            raise UsageError(str(exc.args[0])) from None
    uids = tree.by_name(args.op)
    if not uids.size:
        close = difflib.get_close_matches(args.op, [str(n) for n in tree.names], n=5, cutoff=0.5)
        hint = f"; close names: {', '.join(close)}" if close else ""
        raise UsageError(f"no event named {args.op!r} on rank {tree.rank} device {tree.device}{hint}")
    if not 0 <= args.nth < uids.size:
        raise UsageError(f"--nth {args.nth}: {args.op!r} has {uids.size} instances (0..{uids.size - 1})")
    return int(uids[args.nth])


def run_tree(args: argparse.Namespace) -> int:
    from ..calltree import Tree
    from ..core.units import fmt_time
    from ..explore.tree import load_part

    with reading(args.trace):
        part = load_part(args.trace, rank=args.rank, device=args.device, options=Options(), cache=args.cache)
    tree = Tree.from_batch(part, python=args.python)
    uid = _pick(tree, args)
    n = tree.by_name(tree.name_of(uid)).size
    node = tree.node(uid)
    gpu = fmt_time(float(tree.gpu_time(uid)))
    print(
        printable(
            f"rank {tree.rank} device {tree.device}: {node['name']!r} (UID {uid}, external id "
            f"{node['external_id']}, pid {node['pid']}, tid {node['tid']}; instance "
            f"{int((tree.by_name(node['name']) < uid).sum())} of {n}); GPU {gpu} "
            f"in {tree.gpu_events(uid).size} GPU events"
        )
    )
    if args.up:
        text = tree.format_up(uid, width=args.width)
    else:
        text = tree.format(uid, depth=args.depth, width=args.width, times=args.times)
    print(printable(text, keep_newlines=True), end="")
    return 0


def run_ops(args: argparse.Namespace) -> int:
    from ..calltree import Tree
    from ..explore.tree import is_results_dir, load_part
    from ..render.text import render

    if is_results_dir(args.x):
        from ..results import load

        res = load(args.x)
        name = "ops" if args.rank is not None else "ops_xrank"
        if name not in res.table_names:
            raise UsageError(f"{args.x} has no {name!r} table (results of an older dtrace?); re-run dtrace analyze")
        df = res.table(name)
        if args.rank is not None:
            df = df.loc[df["rank"].to_numpy() == args.rank]
            if args.device is not None:
                df = df.loc[df["device"].to_numpy() == args.device]
            if not len(df):
                raise UsageError(f"no ops for rank {args.rank} in {args.x}")
        title = f"ops, rank {args.rank}" if args.rank is not None else "ops across ranks"
    else:
        with reading(args.x):
            part = load_part(args.x, rank=args.rank, device=args.device, options=Options())
        df = Tree.from_batch(part).ops()
        title = f"ops, rank {part.rank} device {part.device}"
    df = df.sort_values(args.sort, ascending=False, kind="stable")
    print(render(df, args.fmt, title=title, human=not args.raw, max_rows=rows_to_show(args), wide=args.wide), end="")
    return 0


def run_sequences(args: argparse.Namespace) -> int:
    from ..render.sequences import sequence_blocks
    from ..render.text import render

    df, where = _sequences_table(args)
    if args.op is not None:
        df = df.loc[df["op"].astype(str).str.contains(args.op, regex=False).to_numpy(bool)]
    if args.min_len is not None:
        df = df.loc[df["length"].to_numpy() >= args.min_len]
    if not len(df):
        which = f"ops whose name contains {args.op!r}" if args.op is not None else "any op"
        raise UsageError(f"no kernel sequence of {which} in {where}{_min_len_note(args)}")
    df = df.sort_values(["count", "op", "sequence"], ascending=[False, True, True], kind="stable")
    title = f"kernel sequences{f' of ops matching {args.op!r}' if args.op else ''}, {where}"
    if args.fmt == "table" and not args.raw:  # a block per sequence, its kernels one per line
        width = 0 if args.wide else None
        print(sequence_blocks(df, title=title, max_rows=rows_to_show(args), width=width), end="")
        return 0
    print(render(df, args.fmt, title=title, human=not args.raw, max_rows=rows_to_show(args), wide=args.wide), end="")
    return 0


def _sequences_table(args: argparse.Namespace) -> tuple[Any, str]:
    """The sequences table to show and a few words saying whose it is."""
    from ..explore.tree import is_results_dir, load_part

    if not is_results_dir(args.x):
        from ..analyses.sequences import kernel_sequences

        options = Options(sequence_min_len=args.min_len or Options().sequence_min_len)
        with reading(args.x):
            part = load_part(args.x, rank=args.rank, device=args.device, options=options)
        return kernel_sequences(part), f"rank {part.rank} device {part.device}"
    from ..results import load

    res = load(args.x)
    name = "kernel_sequences" if args.rank is not None else "kernel_sequences_xrank"
    if name not in res.table_names:
        raise UsageError(f"{args.x} has no {name!r} table (results of an older dtrace?); re-run dtrace analyze")
    df = res.table(name)
    if args.rank is None:
        return df, "all ranks"
    keep = df["rank"].to_numpy() == args.rank
    if args.device is not None:
        keep &= df["device"].to_numpy() == args.device
    return df.loc[keep], f"rank {args.rank}" + (f" device {args.device}" if args.device is not None else "")


def _min_len_note(args: argparse.Namespace) -> str:
    """A hint for a results directory analysed with a longer shortest sequence than --min-len asks."""
    from ..explore.tree import is_results_dir

    if args.min_len is None or not is_results_dir(args.x):
        return ""
    from ..results import load

    kept = int(load(args.x).manifest.get("options", {}).get("sequence_min_len") or Options().sequence_min_len)
    if args.min_len >= kept:
        return ""
    return (
        f" (it holds sequences of {kept}+ kernels: dtrace analyze --sequence-min-len {args.min_len} keeps shorter ones)"
    )
