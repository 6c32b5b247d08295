#!/bin/bash
# The GPU sharing acceptance runs on a machine with one NVIDIA GPU, as root:
#   bash tests/gpu/acceptance_on_device.sh pytest:3 storm demo:5
# Steps: `pytest:N` (`pytest tests/gpu` N times), `storm` (tests/gpu/mps_survival.py: the
# stop storm through the agent's stop path, the cheating pod, the illegal-address fault, with
# the agent's default `--mps-stop signal`), `demo:N` (`gpushare demo` N times). Each step's
# output lands in $OUT. What the machine lacks comes from ./.whl (ignored by git): Python
# wheels (tests/gpu/device-wheels.txt and the server's packages), `kubectl.xz`, bubblewrap's
# and nftables' Debian packages (`.whl/*.deb`, `.whl/nft/*.deb`), unpacked under /tmp.
# Everything written lands in /tmp/gpushare-run, packed into $OUT/run.tgz after each step.
set -u
BACK=${OUT:-/tmp/gpushare-out}
OUT=/tmp/gpushare-run
mkdir -p "$OUT" "$BACK" /tmp/bin
export PYTHONUNBUFFERED=1 PATH=/tmp/bin:$PATH
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  [ -f .whl/kubectl.xz ] && xz -dc .whl/kubectl.xz > /tmp/bin/kubectl && chmod +x /tmp/bin/kubectl
  if ! command -v bwrap >/dev/null; then
    for f in .whl/bubblewrap_*.deb; do dpkg -x "$f" /tmp/bw; done
    cp /tmp/bw/usr/bin/bwrap /usr/local/bin/bwrap
  fi
  if ! command -v nft >/dev/null && [ -d .whl/nft ]; then
    for f in .whl/nft/*.deb; do dpkg -x "$f" /tmp/nftroot; done
    lib=/tmp/nftroot/usr/lib/x86_64-linux-gnu:/tmp/nftroot/lib/x86_64-linux-gnu
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec /tmp/nftroot/usr/sbin/nft "$@"\n' "$lib" \
      > /usr/sbin/nft
    chmod 755 /usr/sbin/nft
  fi
fi
export PYTHONPATH=$PWD/src:/tmp/site
{
  date -u; uname -r; id
  nvidia-smi --query-gpu=name,memory.total,driver_version,compute_mode --format=csv
  command -v nvidia-cuda-mps-control bwrap nft kubectl
  nft list tables && echo "nft: usable"
  python3 -c 'import torch, pynvml; print("torch", torch.__version__, torch.cuda.is_available())'
  python3 -c 'import gpushare.cli.main' && echo "gpushare imports"
} > "$OUT/probe.txt" 2>&1
cat "$OUT/probe.txt"
tar czf "$BACK/run.tgz" -C "$OUT" .

for step in "$@"; do
  name=${step%%:*}; times=${step#*:}; [ "$times" = "$step" ] && times=1
  for i in $(seq 1 "$times"); do
    start=$(date +%s)
    case $name in
      pytest) python3 -m pytest -q -p no:cacheprovider -x tests/gpu > "$OUT/pytest-$i.txt" 2>&1 ;;
      storm) python3 tests/gpu/mps_survival.py --out "$OUT/s" \
               --phases "${PHASES:-probe,storm,cheat,fault}" --cycles "${CYCLES:-30}" \
               > "$OUT/storm.txt" 2>&1 ;;
      demo) python3 -m gpushare.cli.main demo --timeout 90 --data-dir "/tmp/demo-$i" \
              > "$OUT/demo-$i.txt" 2>&1 ;;
      *) echo "unknown step $name"; exit 2 ;;
    esac
    rc=$?
    echo "$name $i: exit $rc in $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
    [ "$name" = pytest ] && tail -3 "$OUT/pytest-$i.txt"
    [ "$name" = demo ] && tail -5 "$OUT/demo-$i.txt"
    tar czf "$BACK/run.tgz" -C "$OUT" . 2>/dev/null
  done
done
