#!/usr/bin/env bash
# Set up .venv on a fresh machine. Usage: scripts/setup.sh [EXTRAS]   (default: torch,tensorboard)
# torch is pinned here (a CPU wheel on the team's machines); the package itself accepts torch>=2.1.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-torch,tensorboard}"
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[${extras}]"
