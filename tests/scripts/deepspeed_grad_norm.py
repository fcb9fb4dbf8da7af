"""``trainmon.grad_norm_every`` on real DeepSpeed engines (CPU accelerator, one gloo rank).

Usage: deepspeed_grad_norm.py OUTDIR. For each case below a fresh tiny model trains STEPS
optimizer steps with ``trainmon.attach`` writing a journal to ``OUTDIR/<case>``; the worker
counts the norms trainmon computed itself (``grad_norm`` in the DeepSpeed driver) and writes
``OUTDIR/computed.json``: ``{case: count}``. The cases: ZeRO 0 in fp32 without clipping
(trainmon computes the norm), with DeepSpeed's clipping (its norm is kept), and ZeRO 1 (the
optimizer keeps one).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import single_rank

single_rank.set_env()  # before deepspeed is imported

import deepspeed  # noqa: E402
import torch  # noqa: E402

import trainmon  # noqa: E402
import trainmon.integrations.deepspeed as driver  # noqa: E402

STEPS = 7
#: case: (ZeRO stage, gradient_clipping, trainmon.grad_norm_every)
CASES = {
    "noclip_every3": (0, 0.0, 3),
    "noclip_never": (0, 0.0, 0),
    "noclip_every1": (0, 0.0, 1),
    "clip_every3": (0, 1.0, 3),
    "zero1_every3": (1, 1.0, 3),
}


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    computed: dict[str, int] = {}
    real = driver.grad_norm
    calls = [0]

    def counting(grads: list[Any], uniform: bool) -> Any:
        calls[0] += 1
        return real(grads, uniform)

    driver.grad_norm = counting  # type: ignore[assignment]
    for case, (stage, clipping, every) in CASES.items():
        calls[0] = 0
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        config = {
            "train_batch_size": 2,
            "steps_per_print": 100,
            "gradient_clipping": clipping,
            "optimizer": {"type": "Adam", "params": {"lr": 1e-2, "torch_adam": True}},
            "zero_optimization": {"stage": stage},
        }
        engine, _, _, _ = deepspeed.initialize(
            model=net, model_parameters=net.parameters(), config=config
        )
        trainmon.attach(
            engine,
            {
                "jsonl": {"enabled": True, "output_path": str(out), "job_name": case},
                "console": {"enabled": False},
                "trainmon": {"grad_norm_every": every},
            },
        )
        gen = torch.Generator().manual_seed(1)
        for _ in range(STEPS):
            engine.backward(engine(torch.randn(2, 8, generator=gen)).pow(2).mean())
            engine.step()
        driver.detach(engine)  # closes the monitor
        computed[case] = calls[0]
    (out / "computed.json").write_text(json.dumps(computed))


if __name__ == "__main__":
    main()
