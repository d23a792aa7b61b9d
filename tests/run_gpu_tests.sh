#!/usr/bin/env bash
# Run the GPU tests (pytest -m gpu) on a CUDA machine such as the lent H200.
#
# SGLang cannot be imported there (its sglang-kernel wheel needs another torch ABI), so
# this runs only tests/gpu/ and the kernel tests, without the SGLang-dependent conftest.
# On the device tool:  run(command="bash tests/run_gpu_tests.sh")
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: GPU tests need one')"
python3 -m pytest --noconftest -p no:cacheprovider -m gpu -q -rs tests/gpu "$@"
