#!/bin/bash
# Device only: the gpu-quick set's GPU stages by their own commands (.gpukit/commands.txt, from snakemake -n -p),
# timed stages alone, then the two decoding paths side by side.
set -u
START=$(date +%s)
log() { echo "[$(( $(date +%s) - START )) s] $*"; }
COMMANDS=${COMMANDS:-.gpukit/commands.txt}
RUNS=${RUNS:-runs/gpu-quick}
stage() { grep -E "^python3 -m twoscale $1 " "$COMMANDS"; }
pack() { tar czf "$OUT/results.tgz" --exclude='*.pt' "$RUNS/results" "$RUNS/logs" 2>/dev/null; }
[ "${UNPACK:-1}" = 1 ] && mkdir -p /tmp/site && tar xJf .gpukit/polars.tar.xz -C /tmp/site
export PYTHONPATH=$PWD/.gpukit/shim:/tmp/site:$PWD/src PYTHONUNBUFFERED=1
{ nvidia-smi; python3 -c "import sys, torch, polars; print(sys.version, torch.__version__, polars.__version__)"; nproc; } > "$OUT/environment.txt" 2>&1
if [ "${CHECK:-1}" = 1 ]; then
  log "cuda check"; timeout 120 python3 .gpukit/cuda_check.py > "$OUT/cuda_check.txt" 2>&1
  tail -5 "$OUT/cuda_check.txt"; grep -q "cuda check passed" "$OUT/cuda_check.txt" || { log "cuda check failed"; exit 1; }
fi
log train; stage train | bash || { log "train failed"; pack; exit 1; }
pack
log "sweeps, measures, beyond"
{ stage sweep; stage measure; stage beyond; } | while read -r line; do bash -c "$line" & done; wait
sleep 1; while pgrep -f "twoscale (sweep|measure|beyond)" >/dev/null; do sleep 1; done
pack
log "decoding paths"
ARGS=$(stage latency | sed -E 's/.* latency (--params [^ ]+ --recipe [^ ]+ --seed [^ ]+ --checkpoint [^ ]+ --data-dir [^ ]+ --strategies-dir [^ ]+).*/\1/')
timeout 200 python3 scripts/decoding_paths.py $ARGS --out "$OUT/decoding_paths.csv" --rounds 3 --read-every 1 4 2>&1 | tee "$OUT/decoding_paths.txt" | tail -40
log latency; stage latency | bash || log "latency failed"
pack
log sample; stage sample | bash || log "sample failed"
pack
log "spectrum, surrogates"
{ stage spectrum | sed 's/^/timeout 100 /'; stage surrogates; } | while read -r line; do bash -c "$line" & done; wait
sleep 1; while pgrep -f "twoscale (spectrum|surrogates)" >/dev/null; do sleep 1; done
pack
log done
