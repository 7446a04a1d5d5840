"""Seconds of a frozen backbone's features for a folder of N CIFAR-10 JPEGs, cold, then grown by M
photos, then again (`with_frozen_features`, what training, `lbhash encode` and `index build` call),
each in a fresh cache: docs/reference/backbones.md#frozen-backbones-and-the-feature-cache-in-full.
Run it on the code before a change by putting that code's src first (PYTHONPATH=OLD/src).

    OMP_NUM_THREADS=1 python studies/feature_cache_growth.py ../shared/data/cifar10-jpg.tar.gz 500 10 224
"""
import logging, os, shutil, sys, tempfile, time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
tarball, N, M, SIZE = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.environ["LBHASH_CACHE_DIR"] = tempfile.mkdtemp(prefix="feature-cache-")  # (set before lbhash reads it)
from helpers import cifar_jpeg_tree  # noqa: E402
from lbhash.data import InputOptions, load_data  # noqa: E402
from lbhash.data.feature_cache import with_frozen_features  # noqa: E402
from lbhash.models import create_backbone  # noqa: E402

work = Path(tempfile.mkdtemp(prefix="feature-cache-growth-"))
cifar_jpeg_tree(tarball, work / "tree", train=100, test=1)
jpgs = sorted((work / "tree").glob("train/*/*.jpg"))
order = np.random.default_rng(0).permutation(len(jpgs))
photos = work / "photos"
backbone = create_backbone("efficientnet_lite0", pretrained="imagenet").eval()
options = InputOptions(SIZE, "imagenet", 0, True)
logging.basicConfig(level=logging.INFO, format="  %(message)s")
for label, files in (("cold", order[:N]), ("grown", order[N:N + M]), ("again", [])):
    for i in files:
        (photos / jpgs[i].parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(jpgs[i], photos / jpgs[i].parent.name / jpgs[i].name)
    data = load_data(f"images:{photos}")
    start = time.perf_counter()
    with_frozen_features(data, backbone, None, options)
    print(f"{label}: {len(data)} photos, {time.perf_counter() - start:.1f} s", flush=True)
shutil.rmtree(work)
shutil.rmtree(os.environ["LBHASH_CACHE_DIR"])
