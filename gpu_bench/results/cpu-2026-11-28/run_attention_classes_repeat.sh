#!/bin/sh
# A repeat, alone on the machine, of the sizes where attention_classes_*.txt left gains below the bfloat16 size test
# (4x12x512x512 scores): float32 layers under autocast in inference from 256 tokens, T5 in bfloat16 inference from
# 256 tokens.
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 PYTHONPATH=$PWD
B="python benchmarks/bench_attention_lengths.py --heads 12 --head-dim 64"
echo "# commit $(git rev-parse --short HEAD)"
for args in \
    "--kernel bert_self_attention --batch 4 --autocast --lengths 128,192,256,384" \
    "--kernel gpt2_attention --batch 4 --autocast --lengths 128,192,256,384" \
    "--kernel bart_attention --batch 4 --autocast --lengths 128,192,256,384" \
    "--kernel bert_self_attention --batch 1 --autocast --lengths 256,384,512" \
    "--kernel gpt2_attention --batch 1 --autocast --lengths 256,384,512" \
    "--kernel bart_attention --batch 1 --autocast --lengths 256,384,512" \
    "--kernel t5_attention --batch 4 --dtypes bfloat16 --lengths 128,192,256,384" \
    "--kernel t5_attention --batch 1 --dtypes bfloat16 --lengths 128,192,256,384"
do
    echo "\$ $B $args"
    $B $args 2>&1 | grep -v "pytree"
    echo
done
