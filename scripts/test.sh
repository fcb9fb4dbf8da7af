#!/usr/bin/env bash
# Install everything the tests need, then lint, type-check and run the whole suite (slow tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh "torch,tensorboard,wandb,dev"
.venv/bin/ruff check src tests benchmarks
.venv/bin/ruff format --check src tests benchmarks
.venv/bin/mypy
# Real servers for the alert sink tests (tests/alerts): install them from Debian when missing and
# this user may (root, or password-less sudo); otherwise those tests skip and say why.
if ! command -v prometheus-pushgateway >/dev/null || ! command -v prometheus-alertmanager >/dev/null; then
    if [ "$(id -u)" -eq 0 ]; then
        as_root=""
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        as_root="sudo -n"
    else
        as_root="none"
    fi
    if [ "$as_root" != "none" ] && command -v apt-get >/dev/null; then
        { $as_root apt-get update -qq \
            && $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                prometheus prometheus-pushgateway prometheus-alertmanager chromium; } \
            || echo "scripts/test.sh: could not install the Prometheus servers; their tests will skip" >&2
    else
        echo "scripts/test.sh: not root and no sudo: the Prometheus server tests will skip" >&2
    fi
fi
.venv/bin/python -m pytest "$@"
