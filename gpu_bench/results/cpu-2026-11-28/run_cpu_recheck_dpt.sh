#!/bin/sh
# DPT ADP007 inference, whose interquartile range fell just below 1 in run_cpu_reference_models.sh (0.99x
# [0.98-1.00] while ADP007 runs bn(conv(x)) on CPU), timed again with 21 calls per measurement, one thread.
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 PYTHONPATH=$PWD
D=gpu_bench/results/cpu-2026-11-28
name=recheck-dpt-adp007-b16
echo "commit $(git rev-parse --short HEAD)"
start="$(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
python -m gpu_bench --size base --device cpu --interleave --warmup 1 --repeats 21 --no-equivalence \
    --models dpt --rules ADP007 --out "$D/$name" > "$D/$name.log" 2>&1
rc=$?
echo "$name: start $start, end $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg), rc $rc"
