#!/bin/sh
# ADP010's SDPA path in float16 with a mask that differs between heads (a relative position bias [heads, queries,
# keys]: BEiT, Swin, MaxViT), where the float16 rule still asked for rows of 512 keys (float32's measurement,
# attention_masks.txt). Two lanes, one thread each: BERT-base-like heads over 16-512 keys (matmul form), and
# windowed-attention shapes (many short rows, einsum form).
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 PYTHONPATH=$PWD
D=gpu_bench/results/cpu-2026-11-28
B="python benchmarks/bench_attention_lengths.py --dtypes float16 --mask bias --modes infer,train --repeats 7"
lane() {  # output file, arguments
    out=$1; shift
    echo "# commit $(git rev-parse --short HEAD)" > "$out"
    echo "\$ $B $*" >> "$out"
    $B "$@" >> "$out" 2>&1
}
lane $D/attention_masks_fp16_a.txt --batch 4 --heads 12 --head-dim 64 --lengths 16,32,64,128,256,512 &
lane $D/attention_masks_fp16_b.txt --form einsum --batch 64 --heads 4 --head-dim 32 --lengths 16,49,64,128,256 &
wait
