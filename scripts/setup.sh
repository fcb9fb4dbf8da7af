#!/usr/bin/env bash
# Set up .venv on a fresh machine. Usage: scripts/setup.sh [EXTRAS]   (default: torch,tensorboard)
# torch is pinned here (a CPU wheel on the team's machines); the package itself accepts torch>=2.1.
# With "deepspeed" among the extras, DeepSpeed is installed the way its docs say for a machine
# without CUDA (no prebuilt ops, no build isolation, so it builds against the torch installed here).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-torch,tensorboard}"
pip_install=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
python3 -m venv .venv
"${pip_install[@]}" "torch==2.13.0"
case ",${extras}," in
*,deepspeed,*)
    DS_BUILD_OPS=0 DS_ACCELERATOR=cpu "${pip_install[@]}" --no-build-isolation "deepspeed>=0.14"
    extras=$(echo ",${extras}," | sed 's/,deepspeed,/,/; s/^,//; s/,$//')
    ;;
esac
"${pip_install[@]}" -e ".[${extras}]"
