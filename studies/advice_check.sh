#!/usr/bin/env bash
# Issue 60, item 8: the docs' advice, each piece measured on one data set, checked on data it was
# not tuned on (docs/results/advice/README.md says which advice each step checks, and what it found).
#   bash studies/advice_check.sh SHARED_DATA OUT [STEP...]
#   steps: features label-free baselines ridge schedule lbhash16 dbdh-lr neighbourhood
# OUT holds the feature file and the runs (never committed); the small tables go to
# docs/results/advice/ (RESULTS=DIR to write them elsewhere). Run from the repository root with
# lbhash on PATH (make install; . .venv/bin/activate). Every step resumes or redoes only itself.
#
# The new data: CIFAR-10 through another ImageNet network, EfficientNet-Lite1 (the docs' advice was
# measured on the MobileNet-v1 file and on Lite0), at 128 px, on the first 600 images of each class
# of each part of the JPEG tarball (12,000 images: 6,000 train-part, 6,000 test-part); protocol
# cifar10 on it: 500 training and 100 query items per class, the other 11,000 the database. The
# scene set (multi-label) is the second data set where a step can run on it.
set -euo pipefail
DATA=$1; OUT=$2; shift 2
STEPS=${*:-features label-free baselines ridge schedule lbhash16 dbdh-lr neighbourhood}
RESULTS=${RESULTS:-docs/results/advice}
WORKERS=${WORKERS:-2}  # parallel trainings of the reproduce steps
LITE1="$OUT/lite1-128-pc600.npz"
SCENE="$DATA/scene-multilabel.npz"
mkdir -p "$OUT" "$RESULTS"
# the tables name the feature file as OUT/... and the shared data as ../shared/data/..., never this machine's paths
scrub() { find "$RESULTS" -type f \( -name '*.md' -o -name '*.csv' \) -exec sed -i -e "s#$OUT#OUT#g" -e "s#$DATA#../shared/data#g" {} +; }
trap scrub EXIT
for step in $STEPS; do
  case $step in
  features)  # about 4 minutes on 2 cores (48 images/s while another job held most of a core)
    [ -f "$LITE1" ] || python benchmarks/pretrained_features.py "cifar10:$DATA/cifar10-jpg.tar.gz?per-class=600" \
      "$LITE1" --backbone efficientnet_lite1 --image-size 128 2>&1 | grep -v 'img/s' ;;
  label-free)  # methods.md: distill beats ITQ at every length, distill-64 >= ITQ-128 (seeds 0-2)
    python benchmarks/beyond_study.py label-free --data "features:$LITE1" --out "$RESULTS/label-free-lite1" \
      --seeds 0,1,2 ;;
  baselines)  # methods.md "Which to pick": supervised on seen classes, ITQ/distill on unseen ones, linear ~ 88% of CSQ
    lbhash reproduce baselines --data "features:$LITE1" --protocol cifar10 --methods itq,linear,csq,distill \
      --bits 64 --seeds 0,1,2 --held-out 3 --set epochs=30 --workers "$WORKERS" --out "$OUT/baselines"
    mkdir -p "$RESULTS/baselines-lite1"
    cp "$OUT/baselines/baselines.csv" "$OUT/baselines/baselines.md" "$RESULTS/baselines-lite1/" ;;
  ridge)  # methods.md: linear's ridge=0.1, chosen on the MobileNet file's validation split; validation only
    python studies/advice_ridge.py --data "features:$LITE1" --protocol cifar10 --out "$RESULTS/ridge-lite1.csv"
    python studies/advice_ridge.py --data "features:$SCENE" --protocol given --out "$RESULTS/ridge-scene.csv" ;;
  schedule)  # models.md / methods.md: frozen image features train better with --defaults paper (x0.1 every
    # 10 epochs) than with the default's constant rate; the features as the image head takes them
    # (unstandardised, one Linear layer), CSQ and CSQ_D 64 bits, 50 epochs, seeds 0-2, test mAP at R.
    # The grid keeps the last epoch and holds nothing out unless told: "recommended" is the constant
    # rate at its last epoch (models.md's table), "best-val" the default since 2026-11-25
    for profile in recommended paper best-val; do
      extra=(--set defaults=$profile)
      [ $profile = best-val ] && extra=(--set defaults=recommended --set validation=0.1 --set select=best-val)
      lbhash reproduce grid --data "features:$LITE1" --protocol cifar10 --methods csq --bits 64 --seeds 0,1,2 \
        --epochs 50 --set normalize=none --set 'hidden=[]' "${extra[@]}" --workers "$WORKERS" \
        --out "$OUT/schedule-$profile"
      mkdir -p "$RESULTS/schedule-lite1"
      cp "$OUT/schedule-$profile/grid.csv" "$RESULTS/schedule-lite1/grid-$profile.csv"
    done ;;
  lbhash16)  # methods.md "When to use --lbhash" on frozen features: the six methods with and without _D at
    # 16 bits (use it: HashNet +10.7 and DSDH +12.8 there; leave it off: GreedyHash; CSQ_D 2.7 below CSQ;
    # DBDH and DCH: it does not matter), the recommended recipe as the grid runs it (every training item
    # trains, the last epoch is kept), 30 epochs, seeds 0-2
    lbhash reproduce grid --data "features:$LITE1" --protocol cifar10 \
      --bits 16 --seeds 0,1,2 --epochs 30 \
      --workers "$WORKERS" --out "$OUT/lbhash16"
    mkdir -p "$RESULTS/lbhash16-lite1"
    cp "$OUT/lbhash16/grid.csv" "$RESULTS/lbhash16-lite1/grid.csv" ;;
  dbdh-lr)  # methods.md: DBDH's recommended lr 3e-4, chosen on the MobileNet file's validation split
    # (32 bits, seeds 0-1); the same validation study on Lite1, 50 epochs
    lbhash reproduce study --data "features:$LITE1" --protocol cifar10 --study dbdh-lr --methods dbdh --bits 32 \
      --seeds 0,1 --settings 'base,lr=0.001;base,lr=0.0003;base,lr=0.0001' --set epochs=50 --workers "$WORKERS" \
      --out "$OUT/dbdh-lr"
    mkdir -p "$RESULTS/dbdh-lr-lite1"
    cp "$OUT/dbdh-lr/study.csv" "$RESULTS/dbdh-lr-lite1/study.csv" ;;
  neighbourhood)  # methods.md "Both kinds of class matter": CSQ_D with the cosine-student neighbourhood term at
    # weight 10 (chosen on validation classes of the MobileNet file) keeps CSQ_D's seen classes and lifts the
    # unseen ones; the baselines step's protocol and seeds (its csq_D rows are the plain CSQ_D)
    lbhash reproduce baselines --data "features:$LITE1" --protocol cifar10 --methods csq --bits 64 --seeds 0,1,2 \
      --held-out 3 --set epochs=30 --set neighbourhood_weight=10 --set neighbourhood_student=cosine \
      --workers "$WORKERS" --out "$OUT/neighbourhood"
    mkdir -p "$RESULTS/neighbourhood-lite1"
    cp "$OUT/neighbourhood/baselines.csv" "$OUT/neighbourhood/baselines.md" "$RESULTS/neighbourhood-lite1/" ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
  esac
done
