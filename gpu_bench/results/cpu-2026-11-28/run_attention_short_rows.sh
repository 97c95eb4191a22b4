#!/bin/sh
# ADP010's SDPA path on many short rows (windowed attention: MaxViT's 7x7 windows are 49 keys, times batch x
# windows x heads), where the size test on the number of scores alone extrapolated from batch 1-4 x 12 heads.
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 PYTHONPATH=$PWD
B="python benchmarks/bench_attention_lengths.py"
echo "# commit $(git rev-parse --short HEAD)"
for args in \
    "--form einsum --lengths 16,49,64 --batch 256 --heads 2 --head-dim 32 --modes infer,train --repeats 11" \
    "--form einsum --lengths 16,25,36 --batch 2048 --heads 2 --head-dim 32 --modes infer,train --repeats 9" \
    "--form einsum --lengths 16,25,32,49 --batch 1024 --heads 2 --head-dim 64 --modes infer --repeats 9" \
    "--form matmul --lengths 49,64,81,100 --batch 256 --heads 4 --head-dim 32 --modes train --repeats 9" \
    "--form einsum --dtypes bfloat16 --lengths 49,100 --batch 2048 --heads 4 --head-dim 32 --modes infer --repeats 7"
do
    echo "\$ $B $args"
    $B $args
    echo
done
