"""A run's model as ONNX (`RunDirectory.export`, `lbhash export`), with what serving it needs (docs/export.md).

The graph maps the model input (feature rows after the input contract, or images after the
evaluation transform; a dynamic batch axis) to the real outputs u, a frozen backbone included;
the codes are u's signs, packed outside the graph. Written by torch's ONNX exporter (the `export`
extra); read by lbhash.encoders.exported.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

from lbhash.encoders.exported import EXPORT_FORMAT, INPUT_NAME, OUTPUT_NAME

OPSET = 18


def export_manifest(encoder) -> dict:
    """What serving needs besides the graph: bits, the input contract, the image transform,
    the model's identity (as an index records it) and the run's summary."""
    from lbhash import __version__
    from lbhash.data.images import _batch_transform
    from lbhash.models.registry import IMAGENET_MEAN, IMAGENET_STD
    from lbhash.train.builder import input_options

    images = None
    if encoder.input_kind_ == "images":
        transform = _batch_transform(input_options(encoder.config_), train=False)
        images = {"preset": transform.preset, "size": transform.size, "mean": list(IMAGENET_MEAN),
                  "std": list(IMAGENET_STD)}
    return {"format": EXPORT_FORMAT, "bits": int(encoder.bits_), "input": encoder.input_form_.to_dict(),
            "images": images, "model": encoder.identity(), "run": encoder.run_info(), "lbhash": __version__}


def write_onnx(encoder, manifest: dict, path: Path) -> None:
    """The model, traced on a batch of two model inputs, the batch axis dynamic."""
    import torch

    model = encoder.model_.eval()
    # ONNX Runtime computes in float32 on the CPU: the graph is the float32 model (a bf16 backbone's
    # run then differs in a share of its codes by a bit or two: docs/export.md)
    model.bf16_backbone = False
    if encoder.input_kind_ == "images":
        size = manifest["images"]["size"]
        example = torch.zeros(2, 3, size, size)
    else:
        example = torch.zeros(2, encoder.n_features_in_)
    param = next(model.parameters(), None)
    if param is not None:
        example = example.to(param.dtype)
    batch = torch.export.Dim("batch", min=1)
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch._dynamo", "torch.export")]
    levels = [log.level for log in loggers]
    for log in loggers:  # the exporter logs each optional op library it skips (torchvision's)
        log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch's own deprecations inside the exporter
            program = torch.onnx.export(model, (example,), input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
                                        dynamic_shapes=({0: batch},), opset_version=OPSET, dynamo=True,
                                        verbose=False, optimize=True)
    finally:
        for log, level in zip(loggers, levels):
            log.setLevel(level)
    program.save(str(path))
