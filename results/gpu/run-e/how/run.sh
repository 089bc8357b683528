#!/bin/bash
# Device only: the gpu-quick set's GPU stages by their own commands (.gpukit/commands.txt, from snakemake -n -p),
# timed stages alone; first the graphs against the engine on the tests' tiny models, then both decoding paths side by
# side on the trained model. Stages past a time mark are skipped so that what ran comes back within the call.
set -u
START=$(date +%s)
elapsed() { echo $(( $(date +%s) - START )); }
log() { echo "[$(elapsed) s] $*"; }
COMMANDS=${COMMANDS:-.gpukit/commands.txt}
RUNS=${RUNS:-runs/gpu-quick}
stage() { grep -E "^python3 -m twoscale $1 " "$COMMANDS"; }
pack() { tar czf "$OUT/results.tgz" --exclude='*.pt' "$RUNS/results" "$RUNS/logs" 2>/dev/null; }
before() { [ "$(elapsed)" -lt "$1" ] || { log "skipped $2: past $1 s"; return 1; }; }
[ "${UNPACK:-1}" = 1 ] && mkdir -p /tmp/site && tar xJf .gpukit/polars.tar.xz -C /tmp/site
export PYTHONPATH=$PWD/.gpukit/shim:/tmp/site:$PWD/src PYTHONUNBUFFERED=1
{ nvidia-smi; python3 -c "import sys, torch, triton, polars; print(sys.version, torch.__version__, triton.__version__, polars.__version__)"; nproc; } > "$OUT/environment.txt" 2>&1
log "cuda check"; timeout 150 python3 .gpukit/cuda_check.py > "$OUT/cuda_check.txt" 2>&1
tail -3 "$OUT/cuda_check.txt"; grep -q "cuda check passed" "$OUT/cuda_check.txt" || log "cuda check FAILED"
log train; stage train | bash || { log "train failed"; pack; exit 1; }
pack
log "sweeps, measures, beyond"
{ stage sweep; stage measure; stage beyond; } | while read -r line; do bash -c "$line" & done; wait
sleep 1; while pgrep -f "twoscale (sweep|measure|beyond)" >/dev/null; do sleep 1; done
pack
log "decoding paths"
ARGS=$(stage latency | sed -E 's/.* latency (--params [^ ]+ --recipe [^ ]+ --seed [^ ]+ --checkpoint [^ ]+ --data-dir [^ ]+ --strategies-dir [^ ]+).*/\1/')
timeout 230 python3 scripts/decoding_paths.py $ARGS --out "$OUT/decoding_paths.csv" --rounds 3 --read-every 4 \
  --rule-arithmetic compiled eager 2>&1 | tee "$OUT/decoding_paths.txt" | tail -40
before 470 latency && { log latency; stage latency | sed 's/^/timeout 110 /' | bash || log "latency failed"; pack; }
before 500 sample && { log sample; stage sample | sed 's/^/timeout 70 /' | bash || log "sample failed"; pack; }
if before 540 "spectrum, surrogates"; then
  { stage spectrum | sed 's/^/timeout 45 /'; stage surrogates | sed 's/^/timeout 45 /'; } | while read -r line; do bash -c "$line" & done; wait
  sleep 1; while pgrep -f "twoscale (spectrum|surrogates)" >/dev/null; do sleep 1; done
  pack
fi
log done
