#!/usr/bin/env bash
# Issue 28, item 6: the final comparison of "When to use --lbhash" re-measured under the
# recommended recipe's schedule (constant learning rate) and the paper's multi-label L_theta
# (sum over a sample's labels, against the mean it used to be), with CSQ's reference tie rule.
# Same protocol as the earlier final-scene / final-features studies: validation split held out,
# best-validation epoch kept, patience 3, 50 epochs, 3 seeds, queries evaluated once (--test).
# Usage: bash studies/final_comparison.sh OUT [WORKERS] [scene|features|all]
#   (about 1 h with 2 workers on 2 cores)
set -euo pipefail
OUT=${1:?usage: final_comparison.sh OUT [WORKERS]}
WORKERS=${2:-2}
LBHASH=${LBHASH:-lbhash}
PART=${3:-all}
FEATURE_BITS=${FEATURE_BITS:-16,32,64}
M=hashnet,dbdh,dsdh,dch,greedyhash,csq
[ "$PART" = features ] || $LBHASH reproduce study --study final-scene-2 --data features:../shared/data/scene-multilabel.npz --protocol given \
  --methods $M --bits 16,32 --seeds 0,1,2 --settings 'base;paper;paper,multilabel_theta=mean' --test \
  --set epochs=50 --set patience=3 --set progress=false --workers "$WORKERS" --out "$OUT"
[ "$PART" = scene ] || $LBHASH reproduce study --study final-features-2 --data features:../shared/data/cifar10-mobilenetv1-features.npz \
  --protocol cifar10 --methods $M --bits "$FEATURE_BITS" --seeds 0,1,2 --settings 'base;paper' --test \
  --set epochs=50 --set patience=3 --set progress=false --workers "$WORKERS" --out "$OUT"
