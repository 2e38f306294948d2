"""``dtrace synth OUT --ranks 64 --steps 4 --fault compute:rank=5:slow=0.2``: a synthetic cluster job
(``--fault gpu:rank=5:slow=0.2``: a slow GPU, its GEMMs slower at the same recorded shapes)."""

from __future__ import annotations

import argparse
import json
import time

from ..core.constants import (
    FAULT_KINDS,
    SPEEDUP_RANGE,
    SYNTH_MAX_KERNELS_PER_RANK,
    SYNTH_MAX_RANKS,
    SYNTH_MAX_TILE,
)
from ..errors import UsageError
from .common import INT64_MAX, number, real, whole


def add_parser(sub: argparse._SubParsersAction) -> None:
    kinds = "; ".join(f"{k}: {v}" for k, v in FAULT_KINDS.items())
    p = sub.add_parser(
        "synth",
        help="write a synthetic cluster job (one Kineto trace per rank) with faults",
        description="Simulate a data-parallel x tensor-parallel training job and write one realistic "
        "PyTorch-profiler trace per rank plus ground_truth.json (parameters and the "
        "injected faults).",
    )
    p.add_argument("out", metavar="OUT", help="directory for rank-N.json.gz and ground_truth.json")
    p.add_argument("--ranks", type=whole(1, SYNTH_MAX_RANKS), default=8, help="world size (default 8)")
    p.add_argument("--steps", type=whole(1, SYNTH_MAX_KERNELS_PER_RANK), default=3, help="profiled steps (default 3)")
    p.add_argument("--seed", type=whole(0, INT64_MAX), default=0, help="random seed (default 0)")
    p.add_argument("--gpus-per-host", type=whole(1, SYNTH_MAX_RANKS), default=8, help="GPUs per host (default 8)")
    p.add_argument("--streams", type=whole(1, 64), default=2, help="compute streams per GPU (default 2)")
    p.add_argument(
        "--tp",
        type=whole(1, SYNTH_MAX_RANKS),
        default=None,
        help="tensor-parallel group size (default: up to 8, one host)",
    )
    p.add_argument(
        "--kernels-per-step",
        type=whole(1, SYNTH_MAX_KERNELS_PER_RANK),
        default=55,
        help="about this many compute kernels per step",
    )
    p.add_argument(
        "--clock-offset-ms",
        type=real(0, 1e6),
        default=2.0,
        help="host clocks differ by up to ± this many ms (default 2)",
    )
    p.add_argument("--jitter", type=real(0, 1), default=0.02, help="relative spread of kernel durations (default 0.02)")
    _add_noise(p)
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="KIND:rank=R:slow=S",
        help=f"inject a fault (repeatable). {kinds}",
    )
    p.add_argument(
        "--speedup",
        action="append",
        default=[],
        metavar="CLASS=X",
        help="counterfactual: GPU activities of this dtrace class (gemm, attention, ...) take 1/X of "
        "their time (repeatable; the random draws stay the same)",
    )
    p.add_argument(
        "--no-comm",
        action="store_true",
        help="counterfactual: collective transfers take no time (a collective ends at its last arrival)",
    )
    p.add_argument(
        "--record-shapes",
        action="store_true",
        help="record the GEMMs' shapes and dtypes as PyTorch's record_shapes=True does (implied by a gpu fault)",
    )
    p.add_argument("--no-gzip", action="store_true", help="write .json instead of .json.gz")
    t = p.add_argument_group("from a real trace (benchmarks)")
    t.add_argument(
        "--from-trace",
        metavar="FILE",
        default=None,
        help="instead of simulating, replicate this Kineto trace to --ranks ranks (jittered)",
    )
    t.add_argument(
        "--tile",
        type=whole(1, SYNTH_MAX_TILE),
        default=1,
        metavar="N",
        help="with --from-trace: N copies in time (default 1)",
    )
    p.set_defaults(func=run)


def _add_noise(p: argparse.ArgumentParser) -> None:
    """``--host-noise`` and ``--host-noise-ms``: noise between ranks as real jobs have it."""
    p.add_argument(
        "--host-noise",
        type=real(0, 1),
        default=0.0,
        metavar="P",
        help="noise between ranks: the chance per rank and step of a host hiccup (GC, OS) (default 0)",
    )
    p.add_argument(
        "--host-noise-ms",
        type=real(0, 1000),
        default=0.5,
        metavar="MS",
        help="the typical length of a host hiccup in ms (log-normal; default 0.5)",
    )


def _speedups(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        cls, sep, x = item.partition("=")
        if not sep or not cls.strip():
            raise UsageError(f"--speedup {item!r}: expected CLASS=X")
        try:
            out[cls.strip()] = number(x, *SPEEDUP_RANGE)
        except UsageError as exc:
            raise UsageError(f"--speedup {item!r}: {exc}") from None
    return out


def run(args: argparse.Namespace) -> int:
    from ..generate import synth

    t0 = time.perf_counter()
    if args.from_trace:
        if args.fault or args.speedup or args.no_comm or args.record_shapes or args.host_noise:
            raise UsageError(
                "--fault, --speedup, --no-comm, --record-shapes and --host-noise apply to simulated jobs, "
                "not to --from-trace"
            )
        truth = synth.from_trace(
            args.out,
            args.from_trace,
            tile=args.tile,
            ranks=args.ranks,
            seed=args.seed,
            jitter=min(args.jitter, 0.99),
            gzip=not args.no_gzip,
        )
        print(
            f"wrote {args.ranks} ranks of {args.from_trace} tiled {args.tile}x ({truth['events_per_rank']:,} events, "
            f"{truth['json_bytes_per_rank'] / 1e6:.1f} MB of JSON per rank) to {args.out} in "
            f"{time.perf_counter() - t0:.2f} s"
        )
        return 0
    truth = synth.generate(
        args.out,
        ranks=args.ranks,
        steps=args.steps,
        seed=args.seed,
        gpus_per_host=args.gpus_per_host,
        streams=args.streams,
        tp=args.tp,
        kernels_per_step=args.kernels_per_step,
        clock_offset_ns=int(round(args.clock_offset_ms * 1e6)),
        jitter=args.jitter,
        faults=[synth.parse_fault(f) for f in args.fault],
        gzip=not args.no_gzip,
        speedup=_speedups(args.speedup),
        comm=not args.no_comm,
        record_shapes=args.record_shapes,
        host_noise=args.host_noise,
        host_noise_ms=args.host_noise_ms,
    )
    faults = ", ".join(f"{f['kind']} rank {f['rank']} +{f['slow']:.0%}" for f in truth["faults"]) or "none"
    print(
        f"wrote {truth['ranks']} ranks x {truth['steps']} steps (tp {truth['tp']}, dp {truth['dp']}) to "
        f"{args.out} in {time.perf_counter() - t0:.2f} s; faults: {faults}"
    )
    print(json.dumps({k: truth[k] for k in ("stragglers", "host_clock_offsets_ns")}))
    return 0
