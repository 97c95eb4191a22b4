#!/bin/sh
# The two reference models the realistic-size run left out, at their base sizes (gpu_bench/README.md's table):
# DPT-style conditional BatchNorm (ADP007, batch 16) and GroupViT's Linear->BatchNorm1d projections (ADP008, batch
# 512), each variant timed call by call against a vanilla twin, one thread per lane, two lanes at once.
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 PYTHONPATH=$PWD
D=gpu_bench/results/cpu-2026-11-28
run() {  # name, then gpu_bench arguments
    name=$1; shift
    start="$(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
    python -m gpu_bench --size base --device cpu --interleave --warmup 1 --repeats 9 "$@" --out "$D/$name" \
        > "$D/$name.log" 2>&1
    rc=$?
    echo "$name: start $start, end $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg), rc $rc"
}
echo "commit $(git rev-parse --short HEAD)"
run dpt-b16 --models dpt &
run groupvit-b512 --models groupvit &
wait
