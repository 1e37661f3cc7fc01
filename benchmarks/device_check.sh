#!/usr/bin/env bash
# The GPU check of issue "performance": (a) plain inference, (b) onnxaff analyze, (c) the naive numpy
# reduction, on CUDA, for the ResNet-18 and ResNet-50 topologies, 4096 images, batch 256.
#
# Run from the repository root on a CUDA machine that has no network. What it needs beyond that
# machine's Python (numpy, scipy, onnx, networkx, click, matplotlib, pillow are usually there) comes as
# wheels in .whl/ (ignored by git): onnxruntime-gpu for that machine's CUDA, and dtaidistance. Fetch
# them on a connected machine with `pip download --no-deps --only-binary=:all: --python-version 3.12
# --platform manylinux_2_28_x86_64 -d .whl onnxruntime-gpu dtaidistance`.
# The figures go to stdout and $OUT/device_results.md (when OUT is set).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
site=/tmp/onnxaff-site
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl
fi
# onnxaff from this tree, beside the wheels: an install, not a path, because its metrics are entry points
python3 -m pip install -q --no-deps --no-build-isolation --no-index --target "$site" .
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
python3 - <<'PY'
import onnxruntime as ort
providers = ort.get_available_providers()
print("onnxruntime", ort.__version__, providers)
if "CUDAExecutionProvider" not in providers:
    raise SystemExit("onnxruntime here has no CUDA provider: carry an onnxruntime-gpu wheel in .whl/")
from onnxaff.runtime.sessions import cuda_usable
if not cuda_usable():
    raise SystemExit("the CUDA provider does not load here (CUDA/cuDNN libraries?)")
PY
out=${OUT:-/tmp}
python3 benchmarks/analysis_bench.py --device cuda --models resnet18,resnet50 --images 4096 --batch-size 256 \
  --repeats ${REPEATS:-1} --work /tmp/onnxaff-bench | tee "$out/device_results.md"
