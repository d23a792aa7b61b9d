#!/usr/bin/env bash
# Run the GPU tests (pytest -m gpu tests/gpu) on a CUDA GPU machine, with
# SGLang 0.5.23's own Python: from the bundle built on a CPU machine by
#   python -m benchmarks.sglang_gpu.bundle          (writes .gpu_carry in the repository root, git-ignored)
# unless SGLang and sgl_kernel are installed there: copy .gpu_carry to the GPU machine's checkout (or set
# SGLANG_GPU_CARRY to where it is) and run this script there. Extra arguments go to pytest (e.g. -k race).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
exec python3 -m benchmarks.sglang_gpu.run_tests "$@"
