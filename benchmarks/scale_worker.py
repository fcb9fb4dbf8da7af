"""One rank of ``bench_scale.py``: what trainmon's cross-rank statistics cost as ranks grow.

Why: at each window end every rank hands one row to rank 0 (one gloo ``gather`` per window,
from the background thread; the row is :func:`trainmon.core.cross_rank.pack_window`'s, and the
first window's also carries the rank's node identity, :func:`trainmon.core.nodes.identity_row`)
and rank 0 turns the table into ``<metric>/min``, ``/mean``, ``/max``, ``/argmax_rank`` and
straggler metrics (``summarise_ranks``). Whatever the number of ranks, each rank should issue
the same number of collectives per window and send the same bytes. This worker measures, under
``torch.distributed.run`` on the CPU with gloo:

1. **The reduction alone** (``--k`` windows, skipped with ``--k 0``). A
   :class:`~trainmon.core.cross_rank.CrossRankReducer` and a synthetic
   :class:`~trainmon.core.aggregate.WindowStats` holding every metric of ``REDUCED_METRICS``
   (rank ``r`` slowest by ``r`` ms, so rank 0 can check the answer), a new window per call,
   each call after an untimed barrier: ``reducer(window)`` (pack, gather, to lists,
   summarise), a bare ``dist.gather`` of the same row on a gloo group of its own, and on rank
   0 ``summarise_ranks`` and ``pack_window`` alone.
2. **A tiny training loop with and without trainmon, interleaved.** The same model (16-32-1
   MLP, batch 4, SGD) trained two ways in this process, in alternating blocks of
   ``--block-windows`` windows of ``--window-steps`` steps (``--rounds`` rounds after
   ``--warmup-rounds``; the order flips every round): *plain* (forward, backward, one flat
   all-reduce of the gradients and the loss, optimizer step: what trainmon's engine does for
   data parallelism) and *trainmon* (``trainmon.initialize`` with default monitoring, a JSONL
   journal on rank 0; ``--breakdown`` adds the wall-clock breakdown, whose ``perf/comm_ms``
   tells the slowest rank from the ones waiting for it). Per step: the training thread's wall
   and CPU time (``thread_time``); per block: the job's steps x ranks / s on rank 0, from an
   untimed barrier before the block to one after it (the slowest rank's end).

**What trainmon calls** is counted, not assumed: before trainmon is imported, every
collective and point-to-point function of ``torch.distributed`` (and of
``torch.distributed.distributed_c10d``, the same functions) is wrapped by
:class:`CollectiveCounter`, which records each outermost call's function, the bytes this rank
sends in it (tensor ``nbytes``, or the pickled size of an object), its thread and its caller
(the first frame outside torch and outside trainmon's own comms-timing wrapper). A call from
trainmon's code is *monitoring*, except the engine's data-parallel gradient all-reduce and
its start-up parameter broadcast (``ENGINE_DATA_PARALLEL``: the training's own communication,
which the plain loop does too). Calls from ``trainmon.initialize`` are counted apart from the
training run (``setup``); the run's count ends after ``engine.close()``, so a window gathered
while closing counts. Every rank's counts go to rank 0 at the end (by ``gather_object``, with
the counter off).

Rank 0 writes its numbers as JSON to ``--out``. Launched by ``bench_scale.py`` (and by
``tests/test_rank_scale.py`` with ``--k 0`` and a slow rank)::

    python -m torch.distributed.run --nproc_per_node=N --master_addr=127.0.0.1 \
        --master_port=PORT benchmarks/scale_worker.py --k 200 --out result.json
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import pickle
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import harness

# ---- counting what is called (installed before trainmon is imported) ---------------------------

#: torch.distributed function -> the parameter holding what this rank sends (None: nothing).
SENT_PARAM: dict[str, str | None] = {
    "all_reduce": "tensor",
    "all_reduce_coalesced": "tensors",
    "all_gather": "tensor",
    "all_gather_coalesced": "input_tensor_list",
    "all_gather_into_tensor": "input_tensor",
    "all_gather_object": "obj",
    "reduce_scatter": "input_list",
    "reduce_scatter_tensor": "input",
    "all_to_all": "input_tensor_list",
    "all_to_all_single": "input",
    "broadcast": "tensor",
    "broadcast_object_list": "object_list",
    "reduce": "tensor",
    "gather": "tensor",
    "gather_object": "obj",
    "scatter": "scatter_list",
    "scatter_object_list": "scatter_object_input_list",
    "send": "tensor",
    "isend": "tensor",
    "send_object_list": "object_list",
    "recv": "tensor",
    "irecv": "tensor",
    "recv_object_list": "object_list",
    "batch_isend_irecv": "p2p_op_list",
    "barrier": None,
    "monitored_barrier": None,
    "new_group": None,
    "new_subgroups": None,
}
#: trainmon callers that are the training's own communication (DeepSpeed-style data
#: parallelism in trainmon's engine), not monitoring: the plain loop does the same.
ENGINE_DATA_PARALLEL = {
    ("trainmon/integrations/engine.py", "_allreduce_gradients"),
    ("trainmon/integrations/engine.py", "_set_up"),
    ("trainmon/integrations/engine.py", "__init__"),
}
MONITORING = "monitoring"
TRAINING = "engine data parallelism"
LOOP = "benchmark loop"
_TORCH_DIR = str(Path(torch.__file__).resolve().parent)


def _message_bytes(value: Any) -> int:
    """Bytes of a tensor, a list of tensors or P2POps, or (pickled) an object."""
    if value is None:
        return 0
    if isinstance(value, torch.Tensor):
        return int(value.nbytes)
    if isinstance(value, list | tuple) and all(isinstance(v, torch.Tensor) for v in value):
        return sum(int(v.nbytes) for v in value)
    if isinstance(value, list | tuple) and all(hasattr(v, "tensor") for v in value):
        return sum(int(v.tensor.nbytes) for v in value)
    try:
        return len(pickle.dumps(value))
    except Exception:
        return -1


class _Depth(threading.local):
    depth = 0


class CollectiveCounter:
    """Counts torch.distributed calls by (phase, who, function, caller, thread), with bytes.

    Only the outermost call counts (an object collective's inner ``all_gather`` does not);
    nothing is counted while :attr:`phase` is None.
    """

    def __init__(self) -> None:
        self.phase: str | None = None
        self.calls: dict[tuple[str, str, str, str, str], list[int]] = {}
        self.monitoring_sequence: list[tuple[str, int]] = []  # (function, bytes) in the run
        self._local = _Depth()
        self._lock = threading.Lock()
        self._trainmon_dir = ""
        self._skip_files: set[str] = set()

    def install(self) -> None:
        """Wrap every function of :data:`SENT_PARAM` on both torch.distributed modules."""
        from torch.distributed import distributed_c10d

        wrappers: dict[int, Any] = {}
        for op in SENT_PARAM:
            for module in (dist, distributed_c10d):
                original = getattr(module, op, None)
                if original is None:
                    continue
                if id(original) not in wrappers:
                    wrappers[id(original)] = self._wrap(op, original)
                setattr(module, op, wrappers[id(original)])

    def know_trainmon(self) -> None:
        """Where trainmon lives (callers there are trainmon's), and its comms-timing wrapper
        (on with the wall-clock breakdown or the comms logger), which is passed through."""
        import trainmon
        import trainmon.collect.comms as comms

        self._trainmon_dir = str(Path(trainmon.__file__).resolve().parent.parent)
        self._skip_files.add(str(Path(comms.__file__).resolve()))

    def _wrap(self, op: str, original: Callable[..., Any]) -> Callable[..., Any]:
        name = SENT_PARAM[op]
        try:
            params = list(inspect.signature(original).parameters)
        except (TypeError, ValueError):
            params = []
        position = params.index(name) if name in params else -1
        local = self._local

        def counted(*args: Any, **kwargs: Any) -> Any:
            if self.phase is None or local.depth:
                return original(*args, **kwargs)
            if name is None:
                sent = 0
            elif 0 <= position < len(args):
                sent = _message_bytes(args[position])
            else:
                sent = _message_bytes(kwargs.get(name))
            self._record(op, sent, sys._getframe(1))
            local.depth = 1
            try:
                return original(*args, **kwargs)
            finally:
                local.depth = 0

        counted.__wrapped__ = original  # type: ignore[attr-defined]
        counted.__name__ = getattr(original, "__name__", op)
        counted.__doc__ = getattr(original, "__doc__", None)
        return counted

    def _record(self, op: str, sent: int, frame: Any) -> None:
        while frame is not None and (
            frame.f_code.co_filename.startswith(_TORCH_DIR)
            or frame.f_code.co_filename in self._skip_files
        ):
            frame = frame.f_back
        if frame is None:
            path, function = "?", "?"
        else:
            path, function = frame.f_code.co_filename, frame.f_code.co_name
        if self._trainmon_dir and path.startswith(self._trainmon_dir + os.sep):
            path = Path(os.path.relpath(path, self._trainmon_dir)).as_posix()
            who = TRAINING if (path, function) in ENGINE_DATA_PARALLEL else MONITORING
        else:
            path, who = Path(path).name, LOOP
        phase = self.phase or "?"
        key = (phase, who, op, f"{path}:{function}", threading.current_thread().name)
        with self._lock:
            entry = self.calls.setdefault(key, [0, 0])
            entry[0] += 1
            entry[1] += sent
            if who == MONITORING and phase == "run":
                self.monitoring_sequence.append((op, sent))

    def table(self) -> list[dict[str, Any]]:
        """Every counted (phase, who, function, caller, thread) with its calls and bytes."""
        with self._lock:
            return [
                {
                    "phase": phase,
                    "who": who,
                    "op": op,
                    "caller": caller,
                    "thread": thread,
                    "calls": count,
                    "bytes_sent": sent,
                }
                for (phase, who, op, caller, thread), (count, sent) in sorted(self.calls.items())
            ]

    def total(self, phase: str, who: str) -> tuple[int, int]:
        """(calls, bytes sent) of ``who`` in ``phase``."""
        with self._lock:
            found = [v for k, v in self.calls.items() if k[0] == phase and k[1] == who]
        return sum(c for c, _ in found), sum(b for _, b in found)


COUNTER = CollectiveCounter()
COUNTER.install()

from trainmon.core.aggregate import MetricStats, WindowStats  # noqa: E402
from trainmon.core.cross_rank import (  # noqa: E402
    REDUCED_METRICS,
    CrossRankReducer,
    pack_window,
    summarise_ranks,
)
from trainmon.core.nodes import IDENTITY_COLUMNS  # noqa: E402

COUNTER.know_trainmon()

#: Floats in a rank's row (every window) and the identity the first window adds.
ROW_FLOATS = len(pack_window(WindowStats(1, 1, 0.0, 0.0, {})))
FIRST_ROW_FLOATS = ROW_FLOATS + IDENTITY_COLUMNS
SAMPLES_COLUMN = 2 + [name for name, _ in REDUCED_METRICS].index("perf/samples_per_sec")
STEPS_PER_WINDOW = 10
CONTENDERS = ("plain", "trainmon")


# ---- 1. the reduction alone ---------------------------------------------------------------------


def synthetic_window(rank: int, number: int = 0) -> WindowStats:
    """Window ``number`` (steps ``10 * number + 1`` to ``10 * (number + 1)``) with every reduced
    metric; rank ``r``'s step time is ``100 + r`` ms. Each window must end at a later step than
    the one before: the reducer gathers a window once and skips any that ends no later."""
    metrics: dict[str, MetricStats] = {}
    for index, (name, _) in enumerate(REDUCED_METRICS):
        if name == "perf/step_time_ms":
            value = 100.0 + rank
        elif name == "perf/comm_ms":
            value = 5.0
        else:
            value = 10.0 * (index + 1) + 0.5 * rank
        metrics[name] = MetricStats(STEPS_PER_WINDOW, value, 0.9 * value, 1.1 * value, value)
    now = time.time()
    first = number * STEPS_PER_WINDOW + 1
    return WindowStats(first, first + STEPS_PER_WINDOW - 1, now - 1.0, now, metrics)


def timed(
    call: Callable[[], Any], k: int, warmup: int, barrier: bool
) -> tuple[list[int], list[int], list[int], Any]:
    """Wall, thread-CPU and process-CPU ns of ``k`` calls (after ``warmup``); the last result.
    With ``barrier`` every call starts together on all ranks (the barrier is not timed)."""
    t = harness.time_calls(call, k, warmup, before=dist.barrier if barrier else None)
    return t.wall_ns, t.thread_ns, t.process_ns, t.last


def reduction_alone(k: int, warmup: int, rank: int, world: int) -> dict[str, Any] | None:
    """Part 1 (see the module's docstring); rank 0's figures, None elsewhere."""
    reducer = CrossRankReducer(timeout_s=60)
    window = synthetic_window(rank)
    windows = iter([synthetic_window(rank, i) for i in range(warmup + k)])
    walls, threads, processes, result = timed(lambda: reducer(next(windows)), k, warmup, True)
    result = result or {}  # None: the reducer skipped the window; the checks then fail
    reducer.close()

    group = dist.new_group(backend="gloo")
    mine = torch.tensor(pack_window(window), dtype=torch.float64)
    gathered: list[list[torch.Tensor] | None] = [None]

    def gather() -> None:
        rows = [torch.empty_like(mine) for _ in range(world)] if rank == 0 else None
        dist.gather(mine, rows, dst=0, group=group)
        gathered[0] = rows

    gather_walls, gather_threads, _, _ = timed(gather, k, warmup, True)
    dist.destroy_process_group(group)
    if rank != 0:
        return None
    rows = gathered[0]
    assert rows is not None
    table = [row.tolist() for row in rows]
    summ_walls, summ_threads, _, _ = timed(lambda: summarise_ranks(table), k, warmup, False)
    pack_walls, _, _, _ = timed(lambda: pack_window(window), k, warmup, False)
    # every rank's samples (its rate x its 10 steps of 100 + r ms) over the slowest rank's time
    job = sum(table[r][SAMPLES_COLUMN] * (100.0 + r) for r in range(world)) / (99.0 + world)
    return {
        "reducer": harness.summary_us(walls),
        "reducer_thread_cpu": harness.summary_us(threads),
        "reducer_process_cpu": harness.summary_us(processes),
        "gather": harness.summary_us(gather_walls),
        "gather_thread_cpu": harness.summary_us(gather_threads),
        "summarise_ranks": harness.summary_us(summ_walls),
        "summarise_ranks_thread_cpu": harness.summary_us(summ_threads),
        "pack_window": harness.summary_us(pack_walls),
        "checks": {
            "slowest_rank_ok": result.get("perf/slowest_rank") == world - 1,
            "argmax_ok": result.get("perf/step_time_ms/argmax_rank") == world - 1,
            "job_samples_ok": abs(result.get("perf/job_samples_per_sec", float("nan")) - job)
            < 1e-6,
            "metrics_out": len(result),
        },
    }


# ---- 2. the training loop, with and without trainmon --------------------------------------------


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


class PlainLoop:
    """The same training without trainmon: what the engine does for data parallelism (one
    flat all-reduce of the gradients with the loss riding along), nothing else."""

    def __init__(self, world: int) -> None:
        self.model = tiny_model()
        self.params = list(self.model.parameters())
        self.world = world
        if world > 1:
            for tensor in self.params:
                dist.broadcast(tensor.data, src=0)
        self.optimizer = torch.optim.SGD(self.params, lr=0.01)

    def step(self, inputs: torch.Tensor) -> None:
        from torch import _utils

        flatten: Any = _utils._flatten_dense_tensors
        unflatten: Any = _utils._unflatten_dense_tensors
        loss = self.model(inputs).pow(2).mean()
        loss.backward()
        if self.world > 1:
            grads = [p.grad for p in self.params if p.grad is not None]
            flat = flatten([*grads, loss.detach()])
            dist.all_reduce(flat)
            flat.div_(self.world)
            unflat = unflatten(flat, grads)
            for grad, synced in zip(grads, unflat, strict=True):
                grad.copy_(synced)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


class EngineLoop:
    """The same training under ``trainmon.initialize``: default monitoring, JSONL on rank 0."""

    def __init__(
        self, run_dir: Path, window_steps: int, cross_rank: str = "auto", breakdown: bool = False
    ) -> None:
        import trainmon

        model = tiny_model()
        config = {
            "train_micro_batch_size_per_gpu": 4,
            "gradient_accumulation_steps": 1,
            "steps_per_print": window_steps,
            "wall_clock_breakdown": breakdown,
            "optimizer": {"type": "SGD", "params": {"lr": 0.01}},
            "jsonl": {"enabled": True, "output_path": str(run_dir), "job_name": "scale"},
            "console": {"enabled": False},
        }
        if cross_rank != "auto":
            config["trainmon"] = {"cross_rank": cross_rank}
        self.engine, _, _, _ = trainmon.initialize(
            model=model, model_parameters=model.parameters(), config=config
        )

    def step(self, inputs: torch.Tensor) -> None:
        engine = self.engine
        loss = engine(inputs).pow(2).mean()
        engine.backward(loss)
        engine.step()


def training(args: argparse.Namespace, rank: int, world: int, run_dir: Path) -> dict[str, Any]:
    """Part 2 (see the module's docstring): this rank's per-round figures and its counts."""
    torch.manual_seed(1 + rank)
    inputs = torch.randn(4, 16)
    plain = PlainLoop(world)
    dist.barrier()
    COUNTER.phase = "setup"
    engine = EngineLoop(run_dir, args.window_steps, args.cross_rank, args.breakdown)
    COUNTER.phase = None
    loops: dict[str, PlainLoop | EngineLoop] = {"plain": plain, "trainmon": engine}
    steps = args.window_steps * args.block_windows
    slow_s = args.slow_ms / 1e3 if rank == args.slow_rank else 0.0
    perf, thread_cpu = time.perf_counter_ns, time.thread_time_ns
    per_round: dict[str, dict[str, list[float]]] = {
        c: {"step_wall_us": [], "step_cpu_us": [], "block_s": []} for c in CONTENDERS
    }
    step_walls: dict[str, list[float]] = {c: [] for c in CONTENDERS}
    step_cpus: dict[str, list[float]] = {c: [] for c in CONTENDERS}

    def block(contender: str, _round: int, recorded: bool) -> None:
        step = loops[contender].step
        walls, cpus = [], []
        dist.barrier()
        start = perf()
        for _ in range(steps):
            if slow_s:
                time.sleep(slow_s)  # a slow data loader on this rank, outside the step's work
            w0, c0 = perf(), thread_cpu()
            step(inputs)
            c1, w1 = thread_cpu(), perf()
            walls.append((w1 - w0) / 1e3)
            cpus.append((c1 - c0) / 1e3)
        dist.barrier()  # the block ends when the slowest rank's does
        block_s = (perf() - start) / 1e9
        if recorded:
            figures = per_round[contender]
            figures["step_wall_us"].append(statistics.fmean(walls))
            figures["step_cpu_us"].append(statistics.fmean(cpus))
            figures["block_s"].append(block_s)
            step_walls[contender].extend(walls)
            step_cpus[contender].extend(cpus)

    COUNTER.phase = "run"
    harness.interleaved_rounds(
        CONTENDERS, args.rounds, block, order="alternate", warmup_rounds=args.warmup_rounds
    )
    engine_steps = engine.engine.global_steps
    engine.engine.close()
    COUNTER.phase = None
    return {
        "rank": rank,
        "engine_steps": engine_steps,
        "steps_per_block": steps,
        "per_round": per_round,
        "step_wall_us": {
            c: harness.summary_us([int(v * 1e3) for v in step_walls[c]]) for c in CONTENDERS
        },
        "step_cpu_us": {
            c: harness.summary_us([int(v * 1e3) for v in step_cpus[c]]) for c in CONTENDERS
        },
        "counts": COUNTER.table(),
        "monitoring_sequence": COUNTER.monitoring_sequence,
        "monitoring": COUNTER.total("run", MONITORING),
        "training_collectives": COUNTER.total("run", TRAINING),
        "loop_collectives": COUNTER.total("run", LOOP),
        "setup_monitoring": COUNTER.total("setup", MONITORING),
    }


def journal_windows(run_dir: Path) -> list[dict[str, Any]]:
    """Rank 0's window records (with their cross-rank statistics)."""
    import trainmon

    return [r for r in trainmon.read_journal(run_dir / "scale") if r["kind"] == "window"]


def summarise_training(
    mine: dict[str, Any], everyone: list[dict[str, Any]], run_dir: Path, world: int, args: Any
) -> dict[str, Any]:
    """Rank 0: every rank's counts per window and the per-step / job-wide comparison."""
    rng = random.Random(0)
    windows = mine["engine_steps"] // args.window_steps
    per_rank = []
    for rank_result in everyone:
        calls, sent = rank_result["monitoring"]
        sequence = rank_result["monitoring_sequence"]
        per_rank.append(
            {
                "rank": rank_result["rank"],
                "monitoring_calls": calls,
                "monitoring_bytes_sent": sent,
                "collectives_per_window": calls / windows if windows else float("nan"),
                "bytes_sent_per_window": sent / windows if windows else float("nan"),
                "ops": sorted({op for op, _ in sequence}),
                "first_window_bytes": sequence[0][1] if sequence else 0,
                "later_window_bytes": sorted({b for _, b in sequence[1:]}),
                "training_collectives_per_step": rank_result["training_collectives"][0]
                / max(1, rank_result["engine_steps"]),
                "setup_monitoring_calls": rank_result["setup_monitoring"][0],
            }
        )
    rounds = mine["per_round"]
    plain, monitored = rounds["plain"], rounds["trainmon"]
    cpu_groups = {c: [r["per_round"][c]["step_cpu_us"] for r in everyone] for c in CONTENDERS}
    steps = mine["steps_per_block"]
    rates = {c: [steps * world / s for s in rounds[c]["block_s"]] for c in CONTENDERS}
    records = journal_windows(run_dir)
    named = [
        w["stats"]["perf/slowest_rank"]["last"]
        for w in records
        if "perf/slowest_rank" in w.get("stats", {})
    ]
    return {
        "window_steps": args.window_steps,
        "steps_per_block": steps,
        "rounds": args.rounds,
        "warmup_rounds": args.warmup_rounds,
        "engine_steps": mine["engine_steps"],
        "windows": windows,
        "per_rank": per_rank,
        "counts_rank0": mine["counts"],
        "step_wall_us": mine["step_wall_us"],
        "step_cpu_us": mine["step_cpu_us"],
        "step_cpu_us_all_ranks": {
            c: statistics.median(v for r in everyone for v in r["per_round"][c]["step_cpu_us"])
            for c in CONTENDERS
        },
        "step_cpu_added_us": harness.paired_difference_grouped(
            cpu_groups["trainmon"], cpu_groups["plain"], rng, 2000
        ),
        "step_wall_added_us": harness.paired_difference(
            monitored["step_wall_us"], plain["step_wall_us"], rng, 2000
        ),
        "job_steps_x_ranks_per_s": {c: statistics.median(rates[c]) for c in CONTENDERS},
        "job_rate_change": harness.paired_overhead(rates["trainmon"], rates["plain"], rng, 2000),
        "journal": {
            "windows": len(records),
            "with_cross_rank": sum(
                1 for w in records if any(k.endswith("/argmax_rank") for k in w.get("stats", {}))
            ),
            "slowest_rank": named,
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int, default=200, help="timed windows of part 1 (0: skip)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed windows of part 1")
    parser.add_argument("--rounds", type=int, default=30, help="recorded rounds of part 2")
    parser.add_argument("--warmup-rounds", type=int, default=1, help="unrecorded rounds first")
    parser.add_argument("--window-steps", type=int, default=10, help="steps_per_print")
    parser.add_argument("--block-windows", type=int, default=2, help="windows per block")
    parser.add_argument("--slow-rank", type=int, default=-1, help="this rank sleeps each step")
    parser.add_argument("--slow-ms", type=float, default=0.0, help="how long it sleeps")
    parser.add_argument(
        "--cross-rank",
        choices=("auto", "on", "off"),
        default="auto",
        help="trainmon.cross_rank for the trainmon loop (auto: trainmon's default)",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="wall_clock_breakdown on (perf/comm_ms: what names the slowest rank)",
    )
    parser.add_argument("--run-dir", type=Path, help="trainmon's output (default: a temp dir)")
    parser.add_argument("--out", type=Path, required=True, help="rank 0 writes JSON here")
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    own_dir = None
    if args.run_dir is None:
        own_dir = tempfile.TemporaryDirectory(prefix="trainmon-scale-run-")
        args.run_dir = Path(own_dir.name)
    try:
        alone = reduction_alone(args.k, args.warmup, rank, world) if args.k > 0 else None
        mine = training(args, rank, world, args.run_dir)
        everyone: list[Any] = [None] * world if rank == 0 else []
        dist.gather_object(mine, everyone if rank == 0 else None, dst=0)
        if rank == 0:
            payload: dict[str, Any] = {
                "world_size": world,
                "k": args.k,
                "row_floats": ROW_FLOATS,
                "first_row_floats": FIRST_ROW_FLOATS,
                "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                "training": summarise_training(mine, everyone, args.run_dir, world, args),
            }
            if alone is not None:
                payload.update(alone)
            args.out.write_text(json.dumps(payload, indent=2), encoding="utf-8")
        dist.barrier()
    finally:
        dist.destroy_process_group()
        if own_dir is not None:
            own_dir.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
