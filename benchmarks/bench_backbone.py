"""Feature extraction speed of the pretrained EfficientNet-Lite0 on this machine's CPU.

    python benchmarks/bench_backbone.py [--images 256] [--batch 64] [--threads N]

Measures images/s through the transform and the backbone (pooled features) for: the eager model
under no_grad (the reference, 224 px), channels-last memory, inference_mode, smaller input sizes,
and ONNX Runtime when `onnxruntime` and `onnx` are installed (`pip install onnxruntime onnx`; not
a dependency of lbhash). Each line gives the ratio to the reference measured in the same run and
the time all 60,000 CIFAR-10 images would take at that rate. Images are CIFAR-sized (32 x 32)
random pixels: the cost does not depend on their content. Takes 2-4 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import torch

from lbhash.data.augment import BatchTransform
from lbhash.models import create_backbone

CIFAR10_IMAGES = 60_000


def _rate(run, images: np.ndarray, batch: int) -> float:
    run(images[:batch])  # warm-up: the first call builds kernels and caches
    start = time.perf_counter()
    for i in range(0, len(images), batch):
        run(images[i:i + batch])
    return len(images) / (time.perf_counter() - start)


def torch_runner(net, size: int, channels_last: bool, inference: bool):
    transform = BatchTransform("imagenet", size, train=False)
    net = net.to(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    context = torch.inference_mode if inference else torch.no_grad

    def run(batch: np.ndarray):
        with context():
            x = transform(torch.from_numpy(batch))
            x = x.contiguous(memory_format=torch.channels_last) if channels_last else x.contiguous()
            return net(x)
    return run


def onnx_runner(net, size: int, folder: str):
    import onnxruntime

    transform = BatchTransform("imagenet", size, train=False)
    path = os.path.join(folder, f"lite0-{size}.onnx")
    net = net.to(memory_format=torch.contiguous_format)
    torch.onnx.export(net, (torch.zeros(2, 3, size, size),), path, input_names=["x"], output_names=["f"],
                      dynamic_axes={"x": {0: "batch"}, "f": {0: "batch"}}, dynamo=False)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    def run(batch: np.ndarray):
        with torch.inference_mode():
            x = transform(torch.from_numpy(batch)).contiguous().numpy()
        return session.run(None, {"x": x})[0]
    return run, session, path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    images = np.random.default_rng(0).integers(0, 256, (args.images, 32, 32, 3), dtype=np.uint8)
    net = create_backbone("efficientnet_lite0", pretrained="imagenet").eval()
    print(f"EfficientNet-Lite0 features, {args.images} CIFAR-sized images in batches of {args.batch}, "
          f"{args.threads} threads")
    cases = [("eager, no_grad", 224, False, False), ("channels_last", 224, True, False),
             ("channels_last + inference_mode", 224, True, True), ("channels_last + inference_mode", 192, True, True),
             ("channels_last + inference_mode", 160, True, True), ("channels_last + inference_mode", 128, True, True)]
    reference = None
    for name, size, channels_last, inference in cases:
        rate = _rate(torch_runner(net, size, channels_last, inference), images, args.batch)
        reference = reference or rate
        print(f"{name:34s} {size:3d} px  {rate:7.1f} images/s  x{rate / reference:4.2f}  "
              f"all of CIFAR-10: {CIFAR10_IMAGES / rate / 60:5.1f} min")
    try:
        import onnx  # noqa: F401  (torch.onnx.export needs it)
        import onnxruntime  # noqa: F401
    except ImportError as err:
        print(f"ONNX Runtime: skipped ({err.name} is not installed)")
        return
    with tempfile.TemporaryDirectory() as folder:
        for size in (224, 160):
            run, session, _ = onnx_runner(net, size, folder)
            with torch.inference_mode():
                x = BatchTransform("imagenet", size, train=False)(torch.from_numpy(images[:4]))
                gap = np.abs(session.run(None, {"x": x.contiguous().numpy()})[0] - net(x).numpy()).max()
            rate = _rate(run, images, args.batch)
            print(f"{'ONNX Runtime':34s} {size:3d} px  {rate:7.1f} images/s  x{rate / reference:4.2f}  "
                  f"all of CIFAR-10: {CIFAR10_IMAGES / rate / 60:5.1f} min  (max |diff| to torch {gap:.1e})")


if __name__ == "__main__":
    main()
