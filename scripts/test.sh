#!/usr/bin/env bash
# Install everything the tests need, then lint, type-check and run the whole suite (slow tests
# included). Extra pytest arguments are passed through, e.g. scripts/test.sh -m "not slow".
set -euo pipefail
cd "$(dirname "$0")/.."

# Real services and a browser from Debian (they do not start on install; the tests start them on
# 127.0.0.1 with temporary storage and stop them by PID). Installed when missing and this user
# may (root, or password-less sudo); otherwise the tests that need them skip and say why.
debian_packages=(prometheus prometheus-pushgateway prometheus-alertmanager chromium)
missing=()
for binary in prometheus prometheus-pushgateway prometheus-alertmanager chromium; do
    command -v "$binary" >/dev/null || missing+=("$binary")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then
        as_root=()
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        as_root=(sudo -n)
    else
        as_root=(none)
    fi
    if [ "${as_root[0]:-}" != "none" ] && command -v apt-get >/dev/null; then
        { "${as_root[@]}" apt-get update -qq \
            && "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
                --no-install-recommends "${debian_packages[@]}"; } \
            || echo "scripts/test.sh: could not install ${missing[*]}; their tests will skip" >&2
    else
        echo "scripts/test.sh: not root and no sudo: tests needing ${missing[*]} will skip" >&2
    fi
fi

bash scripts/setup.sh "torch,tensorboard,wandb,mlflow,comet,deepspeed,transformers,lightning,accelerate,docs,dev"
# DeepSpeed on the CPU: its accelerator, and the small op it JIT-builds once (cached in the venv)
export DS_ACCELERATOR=cpu TORCH_EXTENSIONS_DIR="$PWD/.venv/torch_extensions"
.venv/bin/ruff check src tests benchmarks scripts
.venv/bin/ruff format --check src tests benchmarks scripts
.venv/bin/mypy
# the documentation site: a broken link, anchor or stale API reference fails the build
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$(mktemp -d)"
.venv/bin/python -m pytest "$@"
