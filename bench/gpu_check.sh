#!/usr/bin/env bash
# make gpu-check: the tool end to end on a GPU machine, in under 5 minutes.
#
#   1. mlb env-check                         (a failed check is reported, not fatal: a busy or warm
#                                              GPU fails env-check but the tool can still be tested)
#   2. mlb throughput --profile vision       (reduced sweep: batch 32,64, short stop rule)
#   3. mlb latency --profile vision --requests 200   (skipped, with a message, if the command is absent)
#   4. pytest -m gpu                         (CUDA-event timers, memory meter, NVML probe, GPU runs)
#   5. bench/gpu_timing_check.py             (CUDA-event stage sums vs synchronized wall clock, 10%)
#   6. bench/gpu_energy_check.py             (the CUDA memory line and the energy line: J/step from
#                                              NVML's energy counter over >= 1 s windows of real steps)
#
# Exit codes: 0 every step passed; 1 a step failed; 3 no GPU here: nothing was run ("no GPU:
# skipped") — the tool's own code for "required hardware missing", so CI cannot mistake a machine
# without a GPU for a passed GPU check.
# Results go to $GPU_CHECK_OUT (default mlb-results/gpu-check).
set -u

cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=$(command -v python3)
OUT=${GPU_CHECK_OUT:-mlb-results/gpu-check}
MLB=("$PY" -m mlbaseline)
export PYTHONUNBUFFERED=1

if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "gpu-check: no GPU: skipped (torch.cuda.is_available() is False here)"
    exit 3
fi
mkdir -p "$OUT"
echo "gpu-check: $("$PY" -c 'import torch; print(torch.cuda.get_device_name(0), "| torch", torch.__version__, "| CUDA", torch.version.cuda)')"

declare -a NAMES=() CODES=() SECS=()
failed=0

step() {  # step NAME FATAL_CODES... -- COMMAND...
    local name=$1; shift
    local fatal=()
    while [ "$1" != "--" ]; do fatal+=("$1"); shift; done
    shift
    echo
    echo "=== gpu-check: $name: $*"
    local start=$SECONDS
    timeout 240 "$@"
    local code=$?
    NAMES+=("$name"); CODES+=("$code"); SECS+=($((SECONDS - start)))
    for f in "${fatal[@]}"; do
        if [ "$f" = any ] && [ "$code" -ne 0 ]; then failed=1; fi
        if [ "$f" = "$code" ]; then failed=1; fi
    done
    return 0
}

# env-check: exit 1 (a check failed) is information here; 2, 3 or a crash is a tool failure
step env-check 2 3 124 134 139 -- "${MLB[@]}" env-check --force -o "$OUT/env.json"

step throughput any -- "${MLB[@]}" throughput --profile vision --batch-sizes 32,64 \
    --set throughput.min_time_s=2 --set throughput.max_time_s=20 --set throughput.max_steps=200 \
    --force -o "$OUT/throughput.json"

if "${MLB[@]}" latency --help >/dev/null 2>&1; then
    step latency 2 3 124 134 139 -- "${MLB[@]}" latency --profile vision --requests 200 \
        --force -o "$OUT/latency.json"
else
    echo
    echo "=== gpu-check: latency: 'mlb latency' does not exist in this build: skipped"
    NAMES+=("latency"); CODES+=("skipped"); SECS+=(0)
fi

step "pytest -m gpu" any -- "$PY" -m pytest -q -m gpu tests/

step "timing check" any -- "$PY" bench/gpu_timing_check.py --json "$OUT/timing.json"

step "energy check" any -- "$PY" bench/gpu_energy_check.py --json "$OUT/energy.json"

echo
echo "gpu-check summary (results in $OUT):"
for i in "${!NAMES[@]}"; do
    printf "  %-16s exit %-8s %4ss\n" "${NAMES[$i]}" "${CODES[$i]}" "${SECS[$i]}"
done
if [ "$failed" -ne 0 ]; then
    echo "gpu-check: FAILED"
    exit 1
fi
echo "gpu-check: passed"
exit 0
