#!/bin/bash
# The device-machine run: probe, then the share experiment, then the GPU tests.
#   bash tests/gpu/run_on_device.sh   (with $OUT set, as on the device machine)
# The whole-stack test needs the kubernetes client and the server packages: put them on
# PYTHONPATH first (carried wheels installed with pip --target).
set -u
OUT=${OUT:-/tmp/gpushare-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
{
  date -u; uname -r; id
  nvidia-smi --query-gpu=name,memory.total,driver_version,compute_mode --format=csv
  command -v nvidia-cuda-mps-control nvidia-cuda-mps-server
  python3 -c 'import torch, pynvml, psutil; print("torch", torch.__version__, torch.cuda.is_available())'
} 2>&1 | tee "$OUT/probe.txt"
python3 tests/gpu/share_experiment.py --out "$OUT" --seconds "${SECONDS_PER_PHASE:-20}" 2>&1 | tee "$OUT/experiment.log"
if [ "${RUN_PYTEST:-1}" = 1 ]; then
  python3 -m pytest -q -p no:cacheprovider tests/gpu 2>&1 | tail -20 | tee "$OUT/pytest.txt"
fi
