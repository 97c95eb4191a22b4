#!/bin/sh
# T5's SDPA subclass under bfloat16 autocast on CPU (float32 layers), which `auto` leaves to the original forward
# because it had been measured only with bfloat16 layers. One lane, one thread.
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 PYTHONPATH=$PWD
B="python benchmarks/bench_attention_lengths.py --heads 12 --head-dim 64 --kernel t5_attention --autocast"
echo "# commit $(git rev-parse --short HEAD)"
for args in "--batch 4 --lengths 64,128,256,512 --modes infer,train" "--batch 1 --lengths 256,512,1024 --modes infer"; do
    echo "\$ $B $args"
    $B $args 2>&1 | grep -v pytree
    echo
done
