#!/bin/sh
# BERT-base, GPT-2 small and BART-base under bfloat16 autocast on CPU, batch 4 at 128 tokens, with their attention
# rules (ADP001, ADP003, ADP014): the commit before the bfloat16 size test of the SDPA subclasses (BEFORE: a git
# worktree of it, e.g. `git worktree add /tmp/wt-before 7632af9`) and this one, one lane each, one thread each, every
# variant timed call by call against a vanilla twin.
cd "$(dirname "$0")/../../.."
AFTER=$PWD
BEFORE=${BEFORE:?set BEFORE to a worktree of the commit before}
D=$AFTER/gpu_bench/results/cpu-2026-11-28
export OMP_NUM_THREADS=1
lane() {  # tree, name
    tree=$1; name=$2
    echo "$name start $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) commit $(git -C "$tree" rev-parse --short HEAD)"
    (cd "$tree" && PYTHONPATH=$tree python -m gpu_bench --size base --device cpu --dtype bf16 --interleave --warmup 1 \
        --repeats 9 --models bert,gpt2,bart --rules ADP001,ADP003,ADP014 --batch-size 4 --seq-len 128 \
        --no-equivalence --out "$D/$name") > "$D/$name.log" 2>&1
    echo "$name end $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) rc $?"
}
lane "$BEFORE" bf16-attention-b4-s128-before &
lane "$AFTER" bf16-attention-b4-s128 &
wait
