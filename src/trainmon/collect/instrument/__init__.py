"""The per-step instrumentation every driver feeds: trainmon's engine, ``attach``, callbacks.

A driver translates its framework's hooks into calls on one :class:`StepInstrument`::

    inst = StepInstrument(monitor, samples_per_step=micro_batch * grad_accumulation)
    inst.data_begin(); batch = next(it); inst.data_end()   # a loader the driver sees
    inst.between_end()                        # with between_steps: the gap after step()
    inst.forward_begin(); loss = model(batch); inst.forward_end()
    inst.record_loss(loss)                    # per micro-batch; read in the background
    inst.backward_begin(); loss.backward(); inst.backward_end()
    inst.comm_begin(); all_reduce(grads); inst.comm_end()
    inst.optimizer_begin(); inst.record_grad_norm(norm); opt.step(); inst.optimizer_end()
    inst.step_end(step, lr=lr)                # logs the step's metrics, one enqueue
    inst.between_begin()                      # with between_steps: until the next forward
    ...
    inst.close()

Every hook but ``step_end`` is optional: a driver that sees only the end of each step and
the loss still gets the step time, throughput, loss and memory.
"""

from trainmon.collect.instrument.clock import (
    BACKWARD,
    BETWEEN,
    COMM,
    DATA,
    FORWARD,
    OPTIMIZER,
    PHASES,
    CommSource,
)
from trainmon.collect.instrument.gradnorm import NormOfNorms, grad_norm, norm_value
from trainmon.collect.instrument.loss import LossAccumulator, LossMean
from trainmon.collect.instrument.memory import MemoryProbe
from trainmon.collect.instrument.rates import Throughput
from trainmon.collect.instrument.step import StepInstrument

#: The breakdown's parts: disjoint, so their sum is at most ``perf/step_time_ms``.
BREAKDOWN_METRICS = (
    "perf/forward_ms",
    "perf/backward_inner_ms",
    "perf/optimizer_ms",
    "perf/comm_ms",
    "perf/data_ms",
    "perf/between_steps_ms",
)

__all__ = [
    "BACKWARD",
    "BETWEEN",
    "BREAKDOWN_METRICS",
    "COMM",
    "DATA",
    "FORWARD",
    "OPTIMIZER",
    "PHASES",
    "CommSource",
    "LossAccumulator",
    "LossMean",
    "MemoryProbe",
    "NormOfNorms",
    "StepInstrument",
    "Throughput",
    "grad_norm",
    "norm_value",
]
