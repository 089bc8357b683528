#!/bin/bash
# On a GPU node whose Python has PyTorch but not the workflow's tools, in a copy of the checkout holding a kit from
# `python scripts/gpu_kit.py build` and the set's token arrays (docs/running.md#a-gpu-node-without-the-workflows-tools):
#
#   OUT=<folder> bash scripts/gpu_call.sh
#
# The kit's jobs (a line each: the stage, a tab, its command; among them the check of the CUDA-graph decoding against
# the engine, whose output is $OUT/cuda_check.txt) in its order, each its own process: the jobs between two `wait`
# lines side by side (at most MAX_JOBS at once, default 8), a batch after the one before it has ended. After each
# batch, everything the stages wrote but the model weights is packed into $OUT/results.tgz, so that a call cut short
# brings back all that finished. A job that would start after DEADLINE seconds (default 480) is skipped and listed in
# $OUT/skipped.txt; one still running at LIMIT (default 560) is stopped. $OUT/stages.tsv holds each job's stage,
# start, seconds and exit status, as the jobs end; $OUT/environment.txt the device and libraries. PYTHON (default
# python3) is the interpreter. Exit status 1 when a command failed, 2 without a kit.
#
# A second call on the same node carries on: what ended well (each job) is noted under the set's folder
# (.gpukit-done/<fingerprint of the kit's commands and the package's code>), and a call skips what an earlier one
# noted, so a set longer than one call runs in several while the node keeps its files (training resumes from its
# last checkpoint). Another kit or other code is another fingerprint: everything runs again.
set -u
: "${OUT:?set OUT to the folder that comes back}"
KIT=.gpukit
export PYTHON=${PYTHON:-python3}
DEADLINE=${DEADLINE:-480}
LIMIT=${LIMIT:-560}
START=$(date +%s)
elapsed() { echo $(( $(date +%s) - START )); }
log() { echo "[$(elapsed) s] $*"; }
[ -f "$KIT/commands.txt" ] && [ -f "$KIT/root" ] || { echo "error: $KIT/commands.txt: no kit (scripts/gpu_kit.py build)" >&2; exit 2; }
ROOT=$(cat "$KIT/root")
SITE=""
if [ -f "$KIT/site.tar.xz" ]; then
  SITE=$(mktemp -d) && tar xJf "$KIT/site.tar.xz" -C "$SITE" || { echo "error: $KIT/site.tar.xz: cannot unpack" >&2; exit 2; }
fi
export PYTHONPATH=$PWD/src${SITE:+:$SITE}${PYTHONPATH:+:$PYTHONPATH} TWOSCALE_TRACKING=off PYTHONUNBUFFERED=1
mkdir -p "$OUT"
FINGERPRINT=$( { cat "$KIT/commands.txt"; find src -name '*.py' -print0 | sort -z | xargs -0 cat; } | sha256sum | cut -c1-16)
DONE="$ROOT/.gpukit-done/$FINGERPRINT"
mkdir -p "$(dirname "$DONE")" && touch "$DONE"
done_before() { grep -qxF -- "$1" "$DONE"; }  # a kit line an earlier call on this node ended well
{ nvidia-smi 2>&1 || echo "no nvidia-smi"; nproc
  "$PYTHON" -c "import sys, torch, polars, pydantic; print(sys.version); print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'polars', polars.__version__, 'pydantic', pydantic.__version__)"
} > "$OUT/environment.txt" 2>&1
tail -1 "$OUT/environment.txt"
pack() { tar czf "$OUT/results.tgz" --exclude='*.pt' -C "$ROOT" results logs 2>/dev/null; }
MAX_JOBS=${MAX_JOBS:-8}
printf 'stage\tstart_s\tseconds\tstatus\n' > "$OUT/stages.tsv"
job() {  # stage, command: run it within LIMIT, its row to stages.tsv
  local began status
  began=$(elapsed)
  timeout $(( LIMIT > began ? LIMIT - began : 1 )) bash -c "$2" < /dev/null
  status=$?
  printf '%s\t%s\t%s\t%s\n' "$1" "$began" $(( $(elapsed) - began )) "$status" >> "$OUT/stages.tsv"
  if [ "$status" = 0 ]; then printf '%s\t%s\n' "$1" "$2" >> "$DONE"; else log "$1 failed ($status)"; fi
}
settle() { wait; pack; }  # the batch's jobs ended, what they wrote packed
while IFS=$'\t' read -r stage command; do
  if [ "$stage" = wait ]; then settle; continue; fi
  if done_before "$stage"$'\t'"$command"; then log "$stage done before"; continue; fi
  if [ "$(elapsed)" -ge "$DEADLINE" ]; then
    log "skipped $stage: past $DEADLINE s"; printf '%s\t%s\n' "$stage" "$command" >> "$OUT/skipped.txt"; continue
  fi
  while [ "$(jobs -rp | wc -l)" -ge "$MAX_JOBS" ]; do sleep 1; done
  log "$stage"
  job "$stage" "$command" &
done < "$KIT/commands.txt"
settle
log done
awk -F'\t' 'NR > 1 && $4 != 0 { failed = 1 } END { exit failed }' "$OUT/stages.tsv"
