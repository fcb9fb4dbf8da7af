#!/usr/bin/env bash
# The checks that need a CUDA device (CI has none, so these tests skip there): the CUDA tests,
# then bench_attach with DeepSpeed's engine on the GPU. Run from the repository root on a GPU
# machine whose Python has torch with CUDA, trainmon's dependencies and DeepSpeed:
#   bash scripts/gpu_checks.sh OUTDIR [PYTHON]      (ROUNDS=40, ONLY=bare-twin,attach, BIG_ROUNDS=15)
set -uo pipefail
out=${1:?usage: gpu_checks.sh OUTDIR [PYTHON]}
py=${2:-python3}
mkdir -p "$out"
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 DS_ACCELERATOR=cuda
nvidia-smi -L
"$py" - <<'PY'
import torch
from trainmon.collect.throughput import peak_tflops_for
name = torch.cuda.get_device_name()
print(f"torch {torch.__version__}, {name}: peak dense 16-bit TFLOPS known to trainmon: {peak_tflops_for(name)}")
PY
"$py" -m pytest -q -p no:cacheprovider -k cuda \
    tests/gpu tests/collect/test_meters.py tests/collect/test_comms.py 2>&1 | tee "$out/pytest.log"
tests=$?
# launch-bound (the issue-25 MLP: the host's Python is the step) and device-bound steps
"$py" benchmarks/bench_attach.py --device cuda --only "${ONLY:-bare-twin,attach}" \
    --rounds "${ROUNDS:-40}" --json "$out/attach-cuda.json" 2>&1 | tee "$out/bench-attach-cuda.log"
bench=$?
"$py" benchmarks/bench_attach.py --device cuda --only bare-twin,attach --width 4096 \
    --batch 1024 --steps 50 --rounds "${BIG_ROUNDS:-15}" --json "$out/attach-cuda-big.json" \
    2>&1 | tee "$out/bench-attach-cuda-big.log"
big=$?
echo "pytest: exit $tests; bench_attach: exit $bench, device-bound: exit $big"
exit $((tests || bench || big))
