#!/bin/sh
# ADP010's attention_core (SDPA path against the hand-written core, matmul and einsum forms) with float16 tensors on
# CPU, where `auto` ran the original because SDPA had not been measured there: batch 4 x 12 heads x 64, 16-512 keys,
# inference and training, one thread.
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 PYTHONPATH=$PWD
D=gpu_bench/results/cpu-2026-11-28
B="python benchmarks/bench_attention_lengths.py --batch 4 --heads 12 --head-dim 64 --dtypes float16 --modes infer,train --lengths 16,32,64,128,256,512 --repeats 11"
out=$D/attention_core_fp16.txt
echo "# commit $(git rev-parse --short HEAD)" > "$out"
for form in matmul einsum; do
    echo "\$ $B --form $form" >> "$out"
    $B --form $form >> "$out" 2>&1
    echo >> "$out"
done
