#!/bin/sh
# The rows of run_cpu_realistic.sh whose interquartile range fell below 1 for a rule that runs the original
# computation on CPU (BART ADP004 training 0.93x, GPT-Neo ADP004/ADP006 inference 0.975x), timed again with more
# calls, two lanes in parallel as before.
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 PYTHONPATH=$PWD
D=gpu_bench/results/cpu-2026-11-28
run() {  # name, then gpu_bench arguments
    name=$1; shift
    start="$(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
    python -m gpu_bench --size base --device cpu --interleave --warmup 1 --batch-size 4 --seq-len 128 \
        --no-equivalence "$@" --out "$D/$name" > "$D/$name.log" 2>&1
    rc=$?
    echo "$name: start $start, end $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg), rc $rc"
}
echo "commit $(git rev-parse --short HEAD)"
run recheck-bart-adp004-b4-s128 --models bart --rules ADP004 --repeats 21 &
run recheck-gpt_neo-adp004-adp006-b4-s128 --models gpt_neo --rules ADP004,ADP006 --repeats 15 &
wait
