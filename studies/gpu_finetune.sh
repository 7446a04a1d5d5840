#!/usr/bin/env bash
# The fine-tuned CIFAR-10 grid at 224 px on a CUDA device, in one script with a deadline (a lent GPU
# comes with minutes, not hours): the paper's setting (issue 70 items 4 and 5) and issue 57's table.
#   bash studies/gpu_finetune.sh TARBALL OUT [SECONDS]
# Phases (PHASES, in order):
#   pairs      (the default) the six methods with and without _D at 64 bits, seeds SEEDS, bf16, WORKERS
#              cells at once, in METHODS' order (DBDH and DSDH first: their pairs are the ones the
#              paper's comparison lacks), stopped at the deadline.
#   precision  issue 57's first phase: CSQ and CSQ_D under float32 (--precision 32-true,
#              backbone_precision=fp32) and bf16 (bf16-mixed, backbone_precision=bf16), four cells at once.
#   rest       issue 57's second phase: the other five methods with and without _D under bf16, seed 0.
# The backbone is BACKBONE with PRETRAINED weights at SIZE px (default: resnet50, torchvision's
# ImageNet weights from the torch hub cache, 224 px: the paper's). issue 57's table ran
#   PHASES="precision rest" BACKBONE=efficientnet_lite0 PRETRAINED=imagenet bash studies/gpu_finetune.sh ...
# Same recipe and protocol as studies/finetune.sh's grid64: validation 0.1, model kept by validation.
# Writes OUT/records.tar.gz (each finished cell's metrics.json, log.jsonl, config.yaml, cell.json; the
# grids' grid.csv and logs) every RECORD_EVERY seconds and after each phase, and OUT/gpu.log; the
# cells themselves (checkpoints included) go to CELLS (default OUT/cells). The variables
# SMOKE_ACCELERATOR=cpu, SMOKE_DATA (a spec suffix such as '?per-class=20'), SMOKE_PROTOCOL and
# SMOKE_SETS (extra --set words) only make a small run of the script itself on a CPU.
# `python studies/gpu_finetune_table.py DEST OUT...` makes the tables from what comes back.
set -uo pipefail
TAR=$1; OUT=$2; SECONDS_LEFT=${3:-540}
ACC=${SMOKE_ACCELERATOR:-gpu}; SIZE=${SIZE:-224}
BACKBONE=${BACKBONE:-resnet50}; PRETRAINED=${PRETRAINED-torchvision}  # PRETRAINED= : no weights
SEEDS=${SEEDS:-0,1,2}; METHODS=${METHODS:-dbdh,dsdh,csq,hashnet,dch,greedyhash}
WORKERS=${WORKERS:-16}; PHASES=${PHASES:-pairs}; RECORD_EVERY=${RECORD_EVERY:-60}
CELLS=${CELLS:-$OUT/cells}
read -r -a SETS <<< "${SMOKE_SETS:-}"
start=$(date +%s)
mkdir -p "$OUT" "$CELLS"
LOG="$OUT/gpu.log"
say() { echo "[$(($(date +%s) - start)) s] $*" | tee -a "$LOG"; }
left() { echo $((SECONDS_LEFT - ($(date +%s) - start))); }
COMMON=(--data "cifar10:$TAR${SMOKE_DATA:-}" --protocol "${SMOKE_PROTOCOL:-cifar10}" --bits 64 "${SETS[@]}"
        --set backbone="$BACKBONE" ${PRETRAINED:+--set pretrained="$PRETRAINED"} --set image_size="$SIZE"
        --set validation=0.1 --set select=best-val --set accelerator="$ACC")
FP32=(--set precision=32-true --set backbone_precision=fp32)
BF16=(--set precision=bf16-mixed --set backbone_precision=bf16)
[ "$ACC" = cpu ] && BF16=(--set precision=32-true --set backbone_precision=fp32)  # smoke run only

# one interpreter (torch imports once): the device line, then lbhash's import and the weights check
checks=$(python3 - "$BACKBONE" "$PRETRAINED" <<'PY'
import sys
import torch
print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "", flush=True)
try:
    import lbhash.cli  # noqa: F401
    from lbhash.errors import InputError
    from lbhash.models import create_backbone
except Exception as err:
    print(f"lbhash does not import: {err}")
    raise SystemExit(1)
try:
    create_backbone(sys.argv[1], pretrained=sys.argv[2] or None)
except InputError as err:
    print(err)
    raise SystemExit(2)
PY
); status=$?
say "$(head -n 1 <<< "$checks")"
say "backbone $BACKBONE, weights $PRETRAINED, $SIZE px, seeds $SEEDS, phases $PHASES, $SECONDS_LEFT s"
[ "$status" -eq 0 ] || { say "$(tail -n 1 <<< "$checks")"; exit "$status"; }

grid() {  # grid NAME LOGNAME WORKERS SECONDS [ARGS...]: cells of CELLS/NAME, stopped after SECONDS
  local name=$1 log=$2 workers=$3 limit=$4; shift 4
  timeout -k 10 -s INT "$limit" python3 -m lbhash.cli reproduce grid "${COMMON[@]}" --out "$CELLS/$name" \
    --workers "$workers" "$@" > "$CELLS/$log.log" 2>&1
  say "$log: exit $? ($(grep -c '^done ' "$CELLS/$log.log") cells done)"
}
pack() {  # the records so far, replaced whole (a temporary file, then a rename)
  (cd "$CELLS" && find . \( -name metrics.json -o -name log.jsonl -o -name config.yaml -o -name cell.json \
     -o -name grid.csv -o -name meta.json -o -name '*.log' \) -print0 | tar --null -czf "$OUT/records.tmp.tgz" -T -) \
    && mv -f "$OUT/records.tmp.tgz" "$OUT/records.tar.gz"
}
stop_cells() {  # a grid stopped by its deadline leaves its spawned cells running (the machine is ours alone)
  [ "$ACC" = gpu ] && pkill -f '[m]ultiprocessing.spawn' 2>/dev/null
  return 0
}
(while sleep "$RECORD_EVERY"; do pack; done) &
packer=$!

for phase in $PHASES; do
  rest=$(left)
  [ "$rest" -gt 60 ] || { say "phase $phase skipped: $rest s left"; continue; }
  case $phase in
  pairs)
    say "phase pairs: $METHODS with and without _D, seeds $SEEDS, bf16, $WORKERS cells at once"
    grid pairs pairs "$WORKERS" "$((rest - 20))" --methods "$METHODS" --seeds "$SEEDS" "${BF16[@]}" ;;
  precision)
    say "phase precision: csq and csq_D, fp32 and bf16, four cells at once"
    grid fp32 fp32 2 "$((rest - 20))" --methods csq --seeds 0 "${FP32[@]}" & one=$!
    grid bf16 bf16 2 "$((rest - 20))" --methods csq --seeds 0 "${BF16[@]}" & two=$!
    wait "$one" "$two" ;;
  rest)
    say "phase rest: the other methods under bf16, $rest s left"
    grid bf16 bf16-rest 10 "$((rest - 20))" --methods hashnet,dbdh,dsdh,dch,greedyhash --seeds 0 "${BF16[@]}" ;;
  *) say "unknown phase $phase (pairs, precision, rest)"; kill "$packer"; exit 2 ;;
  esac
  stop_cells
  pack
done
kill "$packer" 2>/dev/null
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv >> "$LOG" 2>/dev/null
pack
say "done"
