"""Per-layer health: gradient norm, weight norm and update/weight ratio per module group.

:class:`LayerWatcher` hooks the optimizer's ``step`` (pre and post hooks), so any loop gets it
without code in the step. Norms are fused ``torch._foreach_norm`` kernels folded per group on
the device with one ``index_add_``; the weights before a measured step are one fused copy held
only across that step. Nothing is read on the training thread: the per-group norms are logged as
tensors and read in the background. :class:`LayerHistory` follows the measurements there so a
firing alert can name the groups that moved most. Metrics and grouping are in the README
("Per-layer health").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from trainmon.core.events import StepScalars

if TYPE_CHECKING:
    from trainmon.core.contracts import MonitorHandle

PREFIX = "layers/"
_GRAD, _WEIGHT, _UPDATE = "/grad_norm", "/weight_norm", "/update_ratio"
#: Groups named in an alert's explanation.
EXPLAIN_TOP = 3


def group_of(name: str, depth: int | None) -> str:
    """The group of parameter ``name``: top-level block (``blocks.11``) or ``depth`` parts."""
    parts = name.split(".")[:-1] or name.split(".")  # drop "weight"/"bias"
    if depth is not None:
        return ".".join(parts[:depth])
    if len(parts) > 1 and parts[1].isdigit():
        return ".".join(parts[:2])
    return parts[0]


class LayerWatcher:
    """Measures per-group norms at every ``every``-th optimizer step; see the module doc.

    Optimizer steps are counted from the monitor's step when watching begins (0 for a new
    run): the ``k``-th step after that is logged at that step plus ``k``, which is the engine's
    ``global_steps`` and a plain loop's optimizer step count. :meth:`remove` unhooks.
    """

    def __init__(
        self,
        monitor: MonitorHandle,
        model: Any,
        optimizer: Any,
        every: int,
        depth: int | None = None,
    ) -> None:
        import torch

        if type(every) is not int or every < 1:
            raise ValueError(f"layer stats: every = {every!r}: expected an integer >= 1")
        if depth is not None and (type(depth) is not int or depth < 1):
            raise ValueError(f"layer stats: depth = {depth!r}: expected an integer >= 1 or None")
        if not callable(getattr(optimizer, "register_step_pre_hook", None)):
            raise TypeError(
                f"layer stats: {type(optimizer).__name__} has no register_step_pre_hook; "
                "expected a torch.optim.Optimizer (torch >= 2.0)"
            )
        self._monitor = monitor
        self._every = every
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not named:
            raise ValueError("layer stats: the model has no trainable parameters")
        groups: dict[str, int] = {}
        index = [groups.setdefault(group_of(n, depth), len(groups)) for n, _ in named]
        self.groups = list(groups)
        self._params = [p for _, p in named]
        device = self._params[0].device
        self._index = torch.tensor(index, device=device)
        self._names = {
            suffix: [f"{PREFIX}{g}{suffix}" for g in self.groups]
            for suffix in (_GRAD, _WEIGHT, _UPDATE)
        }
        self._start = monitor.step
        self._count = 0
        self._before: list[Any] | None = None
        self._grad_norms: Any = None
        self._before_norm: Any = None
        self._step = 0
        self._handles = [
            optimizer.register_step_pre_hook(self._pre),
            optimizer.register_step_post_hook(self._post),
        ]

    def remove(self) -> None:
        """Stop measuring (the optimizer's hooks are removed)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    # ---- optimizer hooks (training thread) ---------------------------------------------------

    def _pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._count += 1
        if self._count % self._every:
            return
        import torch

        with torch.no_grad():
            params = self._params
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
            self._grad_norms = self._per_group(torch._foreach_norm(grads))
            self._before_norm = self._per_group(torch._foreach_norm(params))
            self._before = list(torch._foreach_mul(params, 1.0))  # one fused copy
        self._step = self._start + self._count

    def _post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        before = self._before
        if before is None:
            return
        self._before = None
        import torch

        with torch.no_grad():
            params = self._params
            weight = self._per_group(torch._foreach_norm(params))
            torch._foreach_sub_(before, params)  # the update, in the copy's own memory
            delta = self._per_group(torch._foreach_norm(before))
            ratio = delta / self._before_norm.clamp_min(1e-12)
        values: list[tuple[str, Any, int]] = []
        step = self._step
        for suffix, tensor in ((_GRAD, self._grad_norms), (_WEIGHT, weight), (_UPDATE, ratio)):
            values.extend((name, tensor[i], step) for i, name in enumerate(self._names[suffix]))
        self._grad_norms = None
        self._monitor.write_events(values)

    def _per_group(self, norms: Sequence[Any]) -> Any:
        """Per-parameter norms -> per-group norms (sqrt of the summed squares), on the device."""
        import torch

        squares = torch.stack([n.float() for n in norms]).square()
        total = torch.zeros(len(self.groups), device=squares.device, dtype=squares.dtype)
        return total.index_add_(0, self._index.to(squares.device), squares).sqrt()


class LayerHistory:
    """The last two ``layers/*/grad_norm`` measurements, to explain an alert (background)."""

    def __init__(self) -> None:
        self.latest: tuple[int, dict[str, float]] | None = None
        self.previous: tuple[int, dict[str, float]] | None = None

    def feed(self, records: Sequence[StepScalars]) -> None:
        """Take the per-group gradient norms found in ``records``."""
        for record in records:
            found = {
                name[len(PREFIX) : -len(_GRAD)]: float(value)
                for name, value in record.values.items()
                if name.startswith(PREFIX) and name.endswith(_GRAD)
            }
            if not found:
                continue
            if self.latest is not None and self.latest[0] == record.step:
                self.latest[1].update(found)
            else:
                self.previous, self.latest = self.latest, (record.step, found)

    def explain(self) -> tuple[str, dict[str, Any]] | None:
        """``"layers at step 10 vs 5: grad norm led by fc2 (×120), fc1 (×3.5)"`` and details;
        None before two measurements."""
        if self.latest is None or self.previous is None:
            return None
        (step, now), (before_step, before) = self.latest, self.previous
        moves: list[tuple[float, str, float]] = []
        for group, value in now.items():
            old = before.get(group)
            if old is None:
                continue
            factor = _factor(value, old)
            moves.append((_rank(factor), group, factor))
        if not moves:
            return None
        moves.sort(key=lambda m: m[0], reverse=True)
        top = moves[:EXPLAIN_TOP]
        led = ", ".join(f"{group} ({_times(factor)})" for _, group, factor in top)
        text = f"grad norm led by {led} (layers at step {step} vs {before_step})"
        details = {
            "layers": [{"group": g, "grad_norm_factor": f} for _, g, f in top],
            "layers_step": step,
            "layers_previous_step": before_step,
        }
        return text, details


def _factor(value: float, old: float) -> float:
    if not math.isfinite(value):
        return value if not math.isnan(value) else math.nan
    if old == 0:
        return math.inf if value > 0 else 1.0
    return value / old


def _rank(factor: float) -> float:
    """Non-finite first, then the largest change in either direction."""
    if not math.isfinite(factor):
        return math.inf
    if factor <= 0:
        return 0.0
    return max(factor, 1 / factor)


def _times(factor: float) -> str:
    if math.isnan(factor):
        return "NaN"
    if math.isinf(factor):
        return "×inf"
    return f"×{factor:.3g}"


def explained(
    message: str, details: Mapping[str, Any], history: LayerHistory
) -> tuple[str, dict[str, Any]] | None:
    """``message`` and ``details`` with the layer explanation added, or None without one."""
    found = history.explain()
    if found is None:
        return None
    text, extra = found
    return f"{message}; {text}", {**details, **extra}
