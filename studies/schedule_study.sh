#!/usr/bin/env bash
# Issue 28, item 3: which learning-rate schedule should the recommended recipe use?
# Every deep method, 32 bits, 2 seeds, three schedules (the old x0.1 every 10 epochs, a constant
# rate, cosine to 0 at the last epoch); base and the paper-faithful _D at 30 epochs on digits and
# the scene set, base at 30 epochs on CIFAR-10 features and at 100 epochs on the scene set.
# Validation splits only (studies hold out 10% of each class and never encode the queries).
# Usage: bash studies/schedule_study.sh OUT [WORKERS]   (about 1.5 h with 2 workers on 2 cores)
set -euo pipefail
OUT=${1:?usage: schedule_study.sh OUT [WORKERS]}
WORKERS=${2:-2}
LBHASH=${LBHASH:-lbhash}
FEATURES=features:../shared/data/cifar10-mobilenetv1-features.npz
SCENE=features:../shared/data/scene-multilabel.npz
S='base,lr_step=10,lr_gamma=0.1;base,lr_step=0;base,schedule=cosine,lr_step=0'
D='paper,lr_step=10,lr_gamma=0.1;paper,lr_step=0;paper,schedule=cosine,lr_step=0'
M=hashnet,dbdh,dsdh,dch,greedyhash,csq
run() { # NAME DATA PROTOCOL EPOCHS SETTINGS
  $LBHASH reproduce study --study "$1" --data "$2" --protocol "$3" --methods $M --bits 32 --seeds 0,1 \
    --settings "$5" --set epochs="$4" --set progress=false --workers "$WORKERS" --out "$OUT"
}
case "${STEP:-all}" in
  all|30)
    run schedule-digits-30 digits digits 30 "$S;$D"
    run schedule-scene-30 "$SCENE" given 30 "$S;$D"
    run schedule-features-30 "$FEATURES" cifar10 30 "$S" ;;&
  all|100)
    run schedule-scene-100 "$SCENE" given 100 "$S" ;;
esac
