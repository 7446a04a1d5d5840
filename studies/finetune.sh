#!/usr/bin/env bash
# Issue 57's fine-tuning experiments on the CIFAR-10 JPEGs, in the order they were run; each step is
# resumable (`lbhash reproduce` skips finished cells and resumes unfinished ones; a finished
# `lbhash train` run prints its metrics).
#   bash studies/finetune.sh SHARED_DATA OUT [STEP...]     steps: study check csq64 grid64 seeds64 csq seeds pairs64
# Tables: OUT/study/study.csv, OUT/check/*/metrics.json, OUT/grid*/grid.csv (docs/models.md, docs/results/finetune).
set -euo pipefail
DATA=$1; OUT=$2; shift 2
STEPS=${*:-study check csq64 grid64 seeds64 csq seeds pairs64}
TAR="$DATA/cifar10-jpg.tar.gz"
SMALL="cifar10:$TAR?per-class=100"      # the first 100 training and 100 test images of each class
TUNE=(--set backbone=efficientnet_lite0 --set pretrained=imagenet --set image_size=128)
for step in $STEPS; do
  case $step in
  study)  # the recipe's defaults, chosen on the validation split (100 of the 1,000 training images)
    lbhash reproduce study --data "$SMALL" --protocol given --out "$OUT/study" --study finetune \
      --methods csq --bits 64 --seeds 0 "${TUNE[@]}" --set eval_every=1 \
      --settings 'base;base,freeze_bn=false;base,backbone_lr_scale=1;base,probe_epochs=0,epochs=4;base,train_stages=4;base,epochs=18;base,augment=flip;base,train_stages=4,augment=flip' ;;
  check)  # issue 57's first criterion: frozen against fine-tuned, protocol given, validation 0, CSQ 64 bits
    for kind in frozen tuned; do
      run="$OUT/check/$kind-128"
      if [ -f "$run/metrics.json" ]; then echo "$kind: finished ($run)"; continue; fi
      if [ -d "$run" ]; then lbhash train --out "$run" --resume; continue; fi
      flag=$([ $kind = frozen ] && echo --freeze-backbone || echo --no-freeze-backbone)
      /usr/bin/time -f "$kind %e s" lbhash train --data "$SMALL" --protocol given --validation 0 --method csq \
        --bits 64 --seed 0 --backbone efficientnet_lite0 --pretrained imagenet --image-size 128 $flag \
        --out "$run" 2>&1 | tail -3
    done ;;
  csq64)  # CSQ and CSQ_D at 64 bits first (the grid's cells: grid64 reuses them)
    lbhash reproduce grid --data "cifar10:$TAR" --protocol cifar10 --out "$OUT/grid" --methods csq --bits 64 \
      --seeds 0 "${TUNE[@]}" --set validation=0.1 --set select=best-val ;;
  grid64)  # the six methods with and without _D at 64 bits, fine-tuned, model kept by validation
    lbhash reproduce grid --data "cifar10:$TAR" --protocol cifar10 --out "$OUT/grid" --bits 64 --seeds 0 \
      "${TUNE[@]}" --set validation=0.1 --set select=best-val ;;
  seeds64)  # seeds 1 and 2 of CSQ and CSQ_D at 64 bits first: what _D does, with seeds (docs/methods.md)
    lbhash reproduce grid --data "cifar10:$TAR" --protocol cifar10 --out "$OUT/grid" --methods csq --bits 64 \
      --seeds 1,2 "${TUNE[@]}" --set validation=0.1 --set select=best-val ;;
  csq)  # CSQ and CSQ_D at 16 and 32 bits, seed 0
    lbhash reproduce grid --data "cifar10:$TAR" --protocol cifar10 --out "$OUT/grid" --methods csq --bits 16,32 \
      --seeds 0 "${TUNE[@]}" --set validation=0.1 --set select=best-val ;;
  seeds)  # seeds 1 and 2 of CSQ and CSQ_D at 16, 32 and 64 bits
    lbhash reproduce grid --data "cifar10:$TAR" --protocol cifar10 --out "$OUT/grid" --methods csq --bits 16,32,64 \
      --seeds 1,2 "${TUNE[@]}" --set validation=0.1 --set select=best-val ;;
  pairs64)  # issue 70: seeds 1 and 2 of the other five pairs at 64 bits, two cells at once (a core each);
            # DBDH and DSDH under their own recipes (`lbhash methods`: their optimisers and fine-tuning epochs),
            # whose seed 0 the grid's records do not hold (theirs is the shared recipe's): SEEDS=0,1,2 PAIRS=dbdh,dsdh;
            # PAIRS=greedyhash,dbdh,dsdh leaves out the pairs docs/results/finetune holds already
    lbhash reproduce grid --data "cifar10:$TAR" --protocol cifar10 --out "$OUT/grid" --bits 64 --seeds "${SEEDS:-1,2}" --workers 2 \
      --methods "${PAIRS:-hashnet,dch,greedyhash,dbdh,dsdh}" "${TUNE[@]}" --set validation=0.1 --set select=best-val ;;
  *) echo "unknown step $step (study, check, csq64, grid64, seeds64, csq, seeds, pairs64)" >&2; exit 2 ;;
  esac
done
