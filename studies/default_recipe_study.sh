#!/usr/bin/env bash
# Does the default recipe hold when a run keeps what it trained? (docs/methods.md, "Which epoch a run keeps")
# CSQ and CSQ_D, 64 bits, seeds 0-2, test mAP at the protocol's R, under three recipes of the
# recommended profile:
#   constant-last  a constant rate, last epoch kept (the default)
#   step-last      the paper's x0.1 every 10 epochs, last epoch kept
#   constant-best  a constant rate, 10% of each class held out, best validation epoch kept
#                  (evaluated every 5 epochs): what the schedule study selected with
# on: the MobileNet feature file and the frozen pretrained EfficientNet-Lite0 (160 px) features
# (protocol cifar10), the digits (protocol digits) and the scene set (protocol given).
# Usage: bash studies/default_recipe_study.sh OUT [EPOCHS] [WORKERS]
#   DATASETS="mobilenet pretrained digits scene" RECIPES="constant-last step-last constant-best"
#   then: python studies/default_recipe_table.py OUT
# About 40 min at 30 epochs with 2 workers on 2 cores once the image features are cached
# (extracting them takes about 15 min the first time).
set -euo pipefail
OUT=${1:?usage: default_recipe_study.sh OUT [EPOCHS] [WORKERS]}
EPOCHS=${2:-30}
WORKERS=${3:-2}
LBHASH=${LBHASH:-lbhash}
declare -A DATA=(
  [mobilenet]="features:../shared/data/cifar10-mobilenetv1-features.npz cifar10"
  [pretrained]="cifar10:../shared/data/cifar10-jpg.tar.gz?cache=disk cifar10"
  [digits]="digits digits"
  [scene]="features:../shared/data/scene-multilabel.npz given"
)
PRETRAINED="--set backbone=efficientnet_lite0 --set pretrained=imagenet --set freeze_backbone=true --set image_size=160"
SELECT="--set validation=0.1 --set select=best-val --set eval_every=5"
declare -A RECIPE=(
  [constant-last]="--set lr_step=0 --set validation=0 --set select=last"
  [step-last]="--set schedule=step --set lr_step=10 --set lr_gamma=0.1 --set validation=0 --set select=last"
  [constant-best]="--set lr_step=0 $SELECT"
)
for data in ${DATASETS:-mobilenet pretrained digits scene}; do
  read -r spec protocol <<< "${DATA[$data]}"
  extra=""
  [ "$data" = pretrained ] && extra=$PRETRAINED
  for recipe in ${RECIPES:-constant-last step-last constant-best}; do
    # shellcheck disable=SC2086
    $LBHASH reproduce grid --data "$spec" --protocol "$protocol" --methods csq --bits 64 --seeds 0,1,2 \
      --epochs "$EPOCHS" --workers "$WORKERS" --set progress=false $extra ${RECIPE[$recipe]} \
      --out "$OUT/$data-$EPOCHS-$recipe"
  done
done
