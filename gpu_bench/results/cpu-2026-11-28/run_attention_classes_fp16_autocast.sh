#!/bin/sh
# The SDPA subclasses (ADP001 BERT, ADP002 T5, ADP003 GPT-2, ADP014 BART) with float32 layers under float16 autocast on
# CPU (`torch.autocast("cpu", dtype=torch.float16)`), where `auto` applied the bfloat16-autocast rule without a
# measurement: inference in one lane, training in the other, one thread each (2-core machine), batch 1 over 16-256
# tokens and batch 4 at 16, 64, 256 and 512. 7 rounds: float16 matmuls on this CPU (no AVX-512 FP16) take up to
# seconds per call.
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 PYTHONPATH=$PWD
D=gpu_bench/results/cpu-2026-11-28
B="python benchmarks/bench_attention_lengths.py --heads 12 --head-dim 64 --dtypes float32 --autocast float16 --repeats 7"
K=bert_self_attention,t5_attention,gpt2_attention,bart_attention
lane() {  # output file, mode
    out=$1 mode=$2
    echo "# commit $(git rev-parse --short HEAD)" > "$out"
    for args in "--batch 1 --lengths 16,32,64,128,256" "--batch 4 --lengths 16,64,256,512"; do
        echo "\$ $B --modes $mode --kernel $K $args" >> "$out"
        $B --modes "$mode" --kernel $K $args >> "$out" 2>&1
        echo >> "$out"
    done
}
lane $D/attention_classes_fp16_autocast_infer.txt infer &
lane $D/attention_classes_fp16_autocast_train.txt train &
wait
