#!/bin/sh
# ADP010's SDPA path by the shape of the additive mask: a relative position bias [heads, queries, keys] (BEiT,
# MaxViT) against causal [1, 1, queries, keys] (the padding mask [batch, 1, 1, keys] is the other runs' default).
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 PYTHONPATH=$PWD
B="python benchmarks/bench_attention_lengths.py"
echo "# commit $(git rev-parse --short HEAD)"
for args in \
    "--form einsum --mask bias --lengths 49,64,128,256 --batch 64 --heads 4 --head-dim 32 --modes infer,train --repeats 7" \
    "--mask bias --lengths 128,197,256 --batch 8 --heads 12 --head-dim 64 --modes infer,train --repeats 7" \
    "--mask bias --lengths 512 --batch 8 --heads 12 --head-dim 64 --modes infer,train --repeats 5" \
    "--mask causal --lengths 49,128,256,512 --batch 8 --heads 12 --head-dim 64 --modes infer,train --repeats 7"
do
    echo "\$ $B $args"
    $B $args
    echo
done
