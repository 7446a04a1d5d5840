#!/usr/bin/env bash
# Issue 57 item 6: the fine-tuned CIFAR-10 table at 224 px on a CUDA device, float32 and bf16, in one
# script with a deadline (a lent GPU comes with minutes, not hours).
#   bash studies/gpu_finetune.sh TARBALL OUT [SECONDS]
# First CSQ and CSQ_D at 64 bits twice (float32: --precision 32-true, backbone_precision fp32;
# bf16: --precision bf16-mixed, backbone_precision bf16), all four cells at once; then, in what is
# left of SECONDS, the other methods with and without _D under bf16. Same recipe and protocol as
# studies/finetune.sh's grid64 but image_size 224. Writes OUT/records.tar.gz (each finished cell's
# metrics.json, log.jsonl, config.yaml; grid.csv), after each phase, and OUT/gpu.log. The variables
# SMOKE_ACCELERATOR=cpu, SMOKE_DATA (a spec suffix such as '?per-class=20'), SMOKE_PROTOCOL, SMOKE_SIZE
# and SMOKE_SETS (extra --set words) only make a small run of the script itself on a CPU.
set -uo pipefail
TAR=$1; OUT=$2; SECONDS_LEFT=${3:-540}
ACC=${SMOKE_ACCELERATOR:-gpu}; SIZE=${SMOKE_SIZE:-224}
read -r -a SETS <<< "${SMOKE_SETS:-}"
start=$(date +%s)
mkdir -p "$OUT/cells"
LOG="$OUT/gpu.log"
say() { echo "[$(($(date +%s) - start)) s] $*" | tee -a "$LOG"; }
left() { echo $((SECONDS_LEFT - ($(date +%s) - start))); }
COMMON=(--data "cifar10:$TAR${SMOKE_DATA:-}" --protocol "${SMOKE_PROTOCOL:-cifar10}" --bits 64 --seeds 0 "${SETS[@]}"
        --set backbone=efficientnet_lite0 --set pretrained=imagenet --set image_size=$SIZE
        --set validation=0.1 --set select=best-val --set accelerator=$ACC)
FP32=(--set precision=32-true --set backbone_precision=fp32)
BF16=(--set precision=bf16-mixed --set backbone_precision=bf16)
[ "$ACC" = cpu ] && BF16=(--set precision=32-true --set backbone_precision=fp32)  # smoke run only

say "$(python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")')"
python3 -c 'import lbhash.cli' || { say "lbhash does not import"; exit 1; }

grid() {  # grid NAME LOGNAME WORKERS SECONDS [ARGS...]: cells of OUT/cells/NAME, stopped after SECONDS
  local name=$1 log=$2 workers=$3 limit=$4; shift 4
  timeout -k 10 -s INT "$limit" python3 -m lbhash.cli reproduce grid "${COMMON[@]}" --out "$OUT/cells/$name" \
    --workers "$workers" "$@" > "$OUT/cells/$log.log" 2>&1
  say "$log: exit $? ($(grep -c '^done ' "$OUT/cells/$log.log") cells done)"
}
pack() {
  # a grid stopped by its deadline leaves its spawned cells running (the device machine is ours alone)
  [ "$ACC" = gpu ] && pkill -f '[m]ultiprocessing.spawn' 2>/dev/null
  (cd "$OUT/cells" && find . \( -name metrics.json -o -name log.jsonl -o -name config.yaml -o -name cell.json \
     -o -name grid.csv -o -name '*.log' \) -print0 | tar --null -czf "$OUT/records.tar.gz" -T -)
}

say "phase 1: csq and csq_D, fp32 and bf16, four cells at once"
grid fp32 fp32 2 "$(($(left) - 20))" --methods csq "${FP32[@]}" &
grid bf16 bf16 2 "$(($(left) - 20))" --methods csq "${BF16[@]}" &
wait
pack
rest=$(left)
if [ "$rest" -gt 90 ]; then
  say "phase 2: the other methods under bf16, $rest s left"
  grid bf16 bf16-rest 10 "$((rest - 20))" --methods hashnet,dbdh,dsdh,dch,greedyhash "${BF16[@]}"
  pack
fi
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv >> "$LOG" 2>/dev/null
say "done"
