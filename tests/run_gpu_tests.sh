#!/usr/bin/env bash
# Run the GPU tests (pytest -m gpu tests/gpu) on a CUDA machine such as the lent H200, with
# SGLang 0.5.23's own Python: from the bundle built on a CPU machine by
#   python -m benchmarks.sglang_gpu.bundle          (writes /work/main/.gpu_carry, git-ignored)
# unless SGLang and sgl_kernel are installed there. On the device tool, from /work/main:
#   run(command="bash tests/run_gpu_tests.sh", carry=[".gpu_carry"])
# (from a worktree: carry it too and cd into it first). Extra arguments go to pytest (e.g. -k race).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
exec python3 -m benchmarks.sglang_gpu.run_tests "$@"
