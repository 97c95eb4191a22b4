#!/bin/sh
# Realistic-size CPU table at one commit, two lanes in parallel (one thread each, one per core of the 2-core
# machine); every variant timed call by call against a vanilla twin (--interleave), so load drift hits both sides.
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 PYTHONPATH=$PWD
D=gpu_bench/results/cpu-2026-11-28
R=${R:-9}
lane() {  # name, then gpu_bench arguments
    name=$1; shift
    echo "$name start $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) commit $(git rev-parse --short HEAD)"
    python -m gpu_bench --size base --device cpu --interleave --warmup 1 --repeats "$R" "$@" --out "$D/$name" > "$D/$name.log" 2>&1
    echo "$name end $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) rc $?"
}
(
    lane resnet18-b8 --models resnet --batch-size 8
    lane bert-gpt2-vilt-b4-s128 --models bert,gpt2,vilt --batch-size 4 --seq-len 128 --no-equivalence
) &
(
    lane bart-gpt_neo-t5-b4-s128 --models bart,gpt_neo,t5 --batch-size 4 --seq-len 128 --no-equivalence
) &
wait
