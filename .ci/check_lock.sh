#!/usr/bin/env bash
# Fails when requirements.lock no longer matches pyproject.toml's dependencies.
#
# Compiles the lock again starting from the pinned versions (uv keeps a pin that still
# fits), so only a change in pyproject.toml changes the result, not a new upstream release.
# Regenerate after changing dependencies with the command in requirements.lock's header.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp requirements.lock "$work/requirements.lock"
uv pip compile pyproject.toml --universal --python-version 3.11 --generate-hashes \
  --quiet --no-header -o "$work/requirements.lock"
if ! diff -u <(grep -v '^#' requirements.lock) "$work/requirements.lock"; then
  echo "requirements.lock is out of date with pyproject.toml; regenerate it with:" >&2
  sed -n 2p requirements.lock | sed 's/^#  *//' >&2
  exit 1
fi
echo "requirements.lock matches pyproject.toml"
