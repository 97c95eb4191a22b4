#!/bin/sh
# run_gpu.sh's work inside a fixed time budget (a short GPU lease, a spot instance), from the repository root:
#
#     BUDGET=540 sh gpu_bench/run_gpu_budget.sh
#
# Each step runs under `timeout` with at most its own cap and never past the budget; what a step finished is kept
# (gpu_bench rewrites its results after every model, marking the run incomplete). STEPS names the steps and their
# order; the default puts first what no GPU run has measured yet (gpu_bench/results/h200-*/README.md, "Not run"):
#   kernel-tests               kernel-tests.txt: the kernel tests, Triton kernels on the GPU
#   attention-classes          attention_classes.txt: the SDPA subclasses (ADP001-ADP003, ADP014), one layer
#                              against its transformers class, 64 to 1024 tokens, float32 and bfloat16 layers
#   attention-classes-autocast attention_classes_autocast.txt: the same, float32 layers under bfloat16 autocast
#   attention-masks            attention_masks.txt: ADP010's SDPA with a relative position bias per head, 256-1024 keys
#   base-bf16                  base-bf16/: the base-size suite in bf16 autocast, eager, each variant timed in
#                              alternation with vanilla and vanilla with a vanilla twin (--interleave, an A/A control)
#   base-fp32                  base-fp32/: the same in fp32, unpaired (it gives the peak-memory columns)
#   base-fp16                  base-fp16/: float16 weights (model.half()), inference, --interleave
#   base-amp-fp16              base-amp-fp16/: float16 autocast with a gradient scaler (mixed precision where
#                              bfloat16 is missing: T4, V100), training and inference, --interleave
#   compile-bf16, compile-fp32 compile-*/: the torch.compile anchors, for COMPILE_BF16_MODELS, COMPILE_FP32_MODELS
#   bench-kernels              bench_kernels.txt: every kernel's fast backend against the original computation
#   attention-lengths          attention_lengths.txt, attention_lengths_einsum.txt: ADP010's SDPA against the
#                              hand-written core, 128 to 1024 keys, matmul and einsum form (where it starts to pay)
#   attention-short-rows       attention_short_rows.txt: ADP010 over many short rows (windowed attention)
#   commands.txt               the exact commands, each step's exit status and the seconds spent so far
# BF16_MODELS, FP32_MODELS, FP16_MODELS and AMP16_MODELS (or MODELS for all four) order the suite's models, those
# not timed yet on a GPU first.
# llama (TinyLlama-1.1B shapes) is left out: its ~14 builds at 1.1B parameters do not fit a short budget (smollm
# runs its rules at 135M); run `python -m gpu_bench --size base --models llama` for it (and `--models vilt`, a
# CPU-sized ADP010 check). DEVICE=cpu SIZE=tiny is a dry run without a GPU.
set -u
PYTHON=${PYTHON:-python}
BUDGET=${BUDGET:-540}
DEVICE=${DEVICE:-cuda}
SIZE=${SIZE:-base}
STEPS=${STEPS:-kernel-tests attention-classes attention-classes-autocast attention-masks base-bf16 base-fp32 \
base-fp16 base-amp-fp16 compile-bf16 compile-fp32 bench-kernels attention-lengths attention-short-rows}
BF16_MODELS=${BF16_MODELS:-${MODELS:-bart,vit_einsum,t5,gpt_neo,smollm,bert,gpt2,nanogpt,resnet,dpt,groupvit}}
FP32_MODELS=${FP32_MODELS:-${MODELS:-t5,gpt_neo,smollm,bart,vit_einsum,nanogpt,bert,gpt2,resnet,dpt,groupvit}}
FP16_MODELS=${FP16_MODELS:-${MODELS:-bert,gpt2,bart,t5,nanogpt,vit_einsum}}
AMP16_MODELS=${AMP16_MODELS:-${MODELS:-bert,gpt2,bart,t5,resnet}}
COMPILE_BF16_MODELS=${COMPILE_BF16_MODELS:-gpt2,bart,vit_einsum,bert,nanogpt,resnet}
COMPILE_FP32_MODELS=${COMPILE_FP32_MODELS:-bert,gpt2,nanogpt}
start=$(date +%s)
name=$($PYTHON -c "import torch, sys; cuda = torch.cuda.is_available(); \
sys.exit('no CUDA device') if sys.argv[1] == 'cuda' and not cuda else None; \
print(torch.cuda.get_device_name(0).replace('NVIDIA ', '').replace(' ', '-').lower() if cuda else 'cpu')" "$DEVICE") \
    || exit 1
out=${RESULTS:-gpu_bench/results/${name}-$(date -u +%Y-%m-%d)}
mkdir -p "$out"
{ echo "# $(date -u) $(uname -a)"; $PYTHON -c "import torch; print('torch', torch.__version__, 'cuda', \
torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-')"; \
  echo "# budget ${BUDGET} s; load: $(cat /proc/loadavg 2>/dev/null || true)"; } > "$out/commands.txt"

# step CAP FILE COMMAND...: run COMMAND with its output in FILE, for at most CAP seconds and what is left.
step() {
    cap=$1 file=$2
    shift 2
    limit=$((BUDGET - ($(date +%s) - start)))
    [ "$limit" -gt "$cap" ] && limit=$cap
    if [ "$limit" -lt 20 ]; then
        echo "# skipped, budget spent: $*" >> "$out/commands.txt"
        return
    fi
    echo "\$ timeout $limit $* > $file" >> "$out/commands.txt"
    timeout "$limit" "$@" > "$out/$file" 2>&1
    echo "# exit $? at $(($(date +%s) - start)) s" >> "$out/commands.txt"
}

# bench_attention_lengths.py, inference and training (a command, not a function: timeout runs it)
lengths="$PYTHON benchmarks/bench_attention_lengths.py --device $DEVICE --modes infer,train --repeats 11 \
--min-time 0.01"
classes=bert_self_attention,t5_attention,gpt2_attention,bart_attention
for name in $STEPS; do
    case $name in
    kernel-tests) step 150 kernel-tests.txt $PYTHON -m pytest tests/kernels -q -rs -p no:cacheprovider ;;
    attention-classes) step 70 attention_classes.txt $lengths --batch 8 --dtypes float32,bfloat16 \
        --lengths 64,128,256,512,1024 --kernel "$classes" ;;
    attention-classes-autocast) step 45 attention_classes_autocast.txt $lengths --batch 8 --dtypes float32 \
        --autocast --lengths 64,128,256,512,1024 --kernel "$classes" ;;
    attention-masks) step 40 attention_masks.txt $lengths --batch 8 --dtypes float32,bfloat16 --mask bias \
        --lengths 256,512,768,1024 ;;
    base-bf16) step 150 base-bf16.log $PYTHON -m gpu_bench --size "$SIZE" --device "$DEVICE" --dtype bf16 \
        --no-compile --interleave --repeats 20 --models "$BF16_MODELS" --out "$out/base-bf16" ;;
    base-fp32) step 120 base-fp32.log $PYTHON -m gpu_bench --size "$SIZE" --device "$DEVICE" --dtype fp32 \
        --no-compile --repeats 20 --models "$FP32_MODELS" --out "$out/base-fp32" ;;
    base-fp16) step 90 base-fp16.log $PYTHON -m gpu_bench --size "$SIZE" --device "$DEVICE" --dtype fp16 \
        --no-compile --modes inference --interleave --repeats 20 --models "$FP16_MODELS" --out "$out/base-fp16" ;;
    base-amp-fp16) step 90 base-amp-fp16.log $PYTHON -m gpu_bench --size "$SIZE" --device "$DEVICE" \
        --dtype amp-fp16 --no-compile --interleave --repeats 20 --models "$AMP16_MODELS" --out "$out/base-amp-fp16" ;;
    compile-bf16) step 300 compile-bf16.log $PYTHON -m gpu_bench --size "$SIZE" --device "$DEVICE" --dtype bf16 \
        --compile --models "$COMPILE_BF16_MODELS" --out "$out/compile-bf16" ;;
    compile-fp32) step 300 compile-fp32.log $PYTHON -m gpu_bench --size "$SIZE" --device "$DEVICE" --dtype fp32 \
        --compile --models "$COMPILE_FP32_MODELS" --out "$out/compile-fp32" ;;
    bench-kernels) step 180 bench_kernels.txt $PYTHON benchmarks/bench_kernels.py --device "$DEVICE" --repeats 11 \
        --min-time 0.01 ;;
    attention-lengths)
        step 60 attention_lengths.txt $lengths --batch 8 --dtypes float32,bfloat16 \
            --lengths 128,256,384,512,768,1024
        step 45 attention_lengths_einsum.txt $lengths --batch 8 --dtypes float32,bfloat16 --lengths 128,512,1024 \
            --form einsum ;;
    attention-short-rows) step 40 attention_short_rows.txt $lengths --batch 1024 --heads 2 --head-dim 32 \
        --dtypes float32,bfloat16 --lengths 16,49,64,128,256 --form einsum ;;
    *) echo "# unknown step $name (known: see the comment at the top of $0)" | tee -a "$out/commands.txt" >&2 ;;
    esac
done
echo "results in $out"
