#!/bin/sh
# run_cpu_bf16_attention.sh again, one lane at a time (the commit before, then this one) with 21 calls per
# measurement: with two lanes and 9 calls the A/A twin's training ratio ranged 0.97-1.17x.
cd "$(dirname "$0")/../../.."
AFTER=$PWD
BEFORE=${BEFORE:?set BEFORE to a worktree of the commit before}
D=$AFTER/gpu_bench/results/cpu-2026-11-28
export OMP_NUM_THREADS=1
lane() {  # tree, name
    tree=$1; name=$2
    echo "$name start $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) commit $(git -C "$tree" rev-parse --short HEAD)"
    (cd "$tree" && PYTHONPATH=$tree python -m gpu_bench --size base --device cpu --dtype bf16 --interleave --warmup 1 \
        --repeats 21 --models bert,gpt2,bart --rules ADP001,ADP003,ADP014 --batch-size 4 --seq-len 128 \
        --no-equivalence --out "$D/$name") > "$D/$name.log" 2>&1
    echo "$name end $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) rc $?"
}
lane "$BEFORE" bf16-attention-b4-s128-alone-before
lane "$AFTER" bf16-attention-b4-s128-alone
