"""A run directory as the application layer owns it (`RunDirectory`): trained, resumed, read, encoded with and
exported, which is `lbhash train`, `encode` and `export`; the training engine below (lbhash.train) writes no
files. Training decides between a new run, a resumed one and one with nothing left to train, then hands the run
to lbhash.train.fit with the directory as its store (lbhash.runs.run_files.DirectoryStore); a finished run returns
its metrics without importing the training stack, so `--resume` on it starts fast. The run directory's files: docs/training.md."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from lbhash._io import atomic_path, check_new_output_file, file_sha256, write_json
from lbhash.codes import pack, to_signs
from lbhash.codes_file import write_codes
from lbhash.data import HashDataset
from lbhash.encoders.exported import (EMBEDDING_NAME, EXPORT_DIR, EXPORT_FORMAT, INPUT_NAME, MANIFEST as EXPORTED,
                                      MODEL, OUTPUT_NAME, read_manifest)
from lbhash.errors import InputError, require_extra
from lbhash.runs.train_options import build_config, load_config_file
from lbhash.train.config import RunConfig, TrainConfig
from lbhash.train.optim import check_extension, check_further
from lbhash.train.processes import process_rank
from lbhash.runs.run_files import (CHECKPOINT, CODES, CONFIG, LOG, MANIFEST, SPLIT, DirectoryStore, check_not_failed,
                                finish_run, load_run_config, read_log, read_metrics, run_data_spec, run_lock,
                                verify_files, verify_finished_run)
from lbhash.train.summary import notices_to_stderr, result_line

if TYPE_CHECKING:
    from lbhash.train.fit import Trained

logger = logging.getLogger("lbhash")
EpochHook = Callable[[int], None]


class RunDirectory:
    """A run directory, the one way to each file job of a run: `RunDirectory(out).train(cfg)`, `.resume()`, ..."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def train(self, cfg: TrainConfig, on_epoch_end: EpochHook | None = None, progress: bool | None = None,
              dataset: HashDataset | None = None) -> dict[str, Any]:
        """Train a new run here and return its metrics; {} in the other processes of a
        multi-process run (only rank 0 writes). `dataset` trains on a data set in memory instead of
        loading `cfg.dataset.data`; `on_epoch_end(epoch)` is called after each epoch's checkpoint. Progress
        goes to the "lbhash" logger (stderr where logging is not configured)."""
        trained = self.fit(cfg, on_epoch_end, progress, dataset)
        return {} if trained is None else trained.metrics

    def fit(self, cfg: TrainConfig, on_epoch_end: EpochHook | None = None, progress: bool | None = None,
            dataset: HashDataset | None = None) -> Trained | None:
        """`train`, returning what it trained (`lbhash.train.fit.Trained`); None in the other processes."""
        if cfg is None:
            raise InputError("no configuration given")
        with run_lock(self.path, enabled=process_rank() == 0):  # only rank 0 locks and writes; the others follow it
            if process_rank() == 0 and (self.path / CONFIG).exists():
                raise InputError(f"{self.path} already holds a run: pass --resume to continue it, or choose another "
                                 "--out")
            from lbhash.train.fit import fit

            return fit(cfg, dataset, None, DirectoryStore(self.path), progress, on_epoch_end)

    def resume(self, epochs: int | None = None, progress: bool | None = None,
               on_epoch_end: EpochHook | None = None) -> dict[str, Any]:
        """Continue the run here from its last checkpoint, with its saved config, and return its
        metrics. A finished run is verified against its manifest and left as it is; `epochs` trains
        the run, finished or not, further to that many epochs in all (`check_extension`)."""
        out, first = self.path, process_rank() == 0
        if not (out / CONFIG).is_file():
            raise InputError(f"{out}: nothing to resume (no {CONFIG})")
        with notices_to_stderr(), run_lock(out, enabled=first):
            check_not_failed(out)
            if _nothing_left(out, epochs):
                return _left_as_it_is(out) if first else {}
            cfg = _resumed_config(out, epochs)
            from lbhash.data import load_data, load_split  # the data and the training stack load only to train
            from lbhash.train.fit import fit

            dataset = load_data(run_data_spec(out, cfg))  # the run's own data, found from any working directory
            store = DirectoryStore(out, resume=True, epochs=epochs)
            trained = fit(cfg, dataset, load_split(out / SPLIT), store, progress, on_epoch_end)
        return {} if trained is None else trained.metrics

    def config(self) -> RunConfig:
        """The run's saved config (config.yaml), resolved."""
        return load_run_config(self.path)

    def metrics(self) -> dict[str, Any]:
        """The finished run's metrics (metrics.json)."""
        return read_metrics(self.path)

    def log(self) -> list[dict]:
        """The run's record of each epoch (log.jsonl)."""
        return read_log(self.path / LOG)

    def encoder(self):
        """The run's model as an encoder (`RunEncoder`: what search and the service load)."""
        from lbhash.runs.encoder import RunEncoder

        return RunEncoder.load(self.path)

    def encode(self, data: str | None = None, part: str = "all", accelerator: str = "cpu", precision: str = "32-true",
               devices: int = 1, progress: bool = True, real: bool = False, embeddings: bool = False,
               out: str | Path | None = None, overwrite: bool = False, images=(),
               skip_bad_images: bool = False) -> dict | None:
        """Codes of a data set (default: the run's own) with the run's model (`lbhash encode`).

        `part` selects the run's train/query/database items (the run's own data); other data goes
        through the run's input contract and needs no labels. `images` (instead of `data`): image
        files, folders and image arrays, as `lbhash search --images` takes them (a folder without class
        folders gives unlabelled items). `skip_bad_images` leaves unreadable images out (counted), as
        training does; a run trained with it does so on its own data. Returns the fields of a codes-file part
        (lbhash.codes_file) plus `bits` and `topk`, and writes them to `out` as a codes file of one
        part where given (checked first: an existing file is replaced only with `overwrite`).
        `precision` ("bf16-mixed", "16-mixed") runs a GPU model under autocast: faster, but about 1%
        of items then differ from the run's codes by a bit or two. With devices > 1 the items are
        shared out over processes and rank 0 returns everything (the others None). `real` and
        `embeddings` add the head's real outputs and each item's embedding from the same forward pass.
        """
        from lbhash.runs.codes import EncodeItems, run_forward
        from lbhash.train.forward import embed_sharded, encode_sharded

        if out is not None:
            check_new_output_file(out, "--out", overwrite)
        sharded = embed_sharded if real or embeddings else encode_sharded
        done = run_forward(sharded, self.path, EncodeItems(data, part, images, skip_bad_images), accelerator,
                           precision, devices, progress)
        if done is None:
            return None
        outputs, fields = done
        if not (real or embeddings):
            encoded = {"codes": pack(outputs), **fields}
        else:
            outputs, embedded = outputs
            encoded = {"codes": pack(to_signs(outputs)), **fields, **({"real": outputs} if real else {}),
                       **({"embeddings": embedded} if embeddings else {})}
        if out is not None:
            part_fields = {k: v for k, v in encoded.items() if k not in ("bits", "topk")}
            write_codes(out, encoded["bits"], {"items": part_fields}, topk=encoded["topk"])
        return encoded

    def export(self, out: str | Path | None = None, overwrite: bool = False) -> Path:
        """Write the run's model as ONNX (model.onnx) and its manifest (export.json) to `out` (default:
        RUN_DIR/export; docs/export.md); returns the export directory. An existing export is replaced
        only with `overwrite`; each file is written atomically, the manifest last (it holds the model's
        SHA-256, so a reader never pairs a manifest with another model)."""
        require_extra("lbhash export", "export", "onnx", "onnxscript")
        out = self.path / EXPORT_DIR if out is None else Path(out)
        if out.exists() and not overwrite:
            raise InputError(f"{out}: already exists (choose another --out to keep it, or pass --overwrite to "
                             "replace it)")
        if out.exists() and not (out / EXPORTED).is_file() and any(out.iterdir()):
            raise InputError(f"{out}: a directory that is not an export; refusing to write into it")
        encoder = self.encoder()
        manifest = _export_manifest(encoder)
        # what the run's backbone computed in, read before the float32 graph is traced (_write_onnx turns the
        # model's bf16 off): a bf16 run's export answers in float32, and serving it says so
        manifest["run_precision"] = "bf16" if getattr(encoder.model_, "bf16_backbone", False) else "fp32"
        out.mkdir(parents=True, exist_ok=True)
        with atomic_path(out / MODEL) as tmp:
            _write_onnx(encoder, manifest, tmp)
        manifest["onnx"] = {"file": MODEL, "sha256": file_sha256(out / MODEL), "opset": OPSET,
                            "input": INPUT_NAME, "output": OUTPUT_NAME,
                            # an image graph's second output: what the default ranking needs beside u
                            **({"embedding": EMBEDDING_NAME} if encoder.input_kind_ == "images" else {})}
        write_json(out / EXPORTED, manifest)
        read_manifest(out)  # what a reader will check
        return out


def train_from_options(out: Path | None, config_file: Path | None = None, flags: dict[str, Any] | None = None,
                       resume: bool = False, epochs: int | None = None, progress: bool | None = None) -> list[str]:
    """`lbhash train`: a new run of `build_config(config_file's values, flags)` in `out` (runs/<variant>-<bits>bits-
    seed<seed> by default), or with `resume` the run in `out` continued (to `epochs` in all); the lines it prints."""
    from lbhash.evaluate import format_metrics

    if resume:
        metrics = RunDirectory(out).resume(epochs=epochs, progress=progress)
    else:
        file_values = load_config_file(config_file) if config_file else {}
        if (flags or {}).get("data") is None and "data" not in file_values:
            raise InputError("--data is required, e.g. --data features:PATH.npz (see docs/data.md); "
                             "`lbhash demo` trains on the toy digits set")
        cfg = build_config(file_values, flags)
        out = out if out is not None else Path("runs") / f"{cfg.variant}-{cfg.hashing.bits}bits-seed{cfg.recipe.seed}"
        metrics = RunDirectory(out).train(cfg)
    shown = [format_metrics(metrics)] if "map" in metrics else []
    return shown + [f"run directory: {out}"] if metrics else []  # no metrics: another process of a multi-process run


# --- `export`'s ONNX graph (read by lbhash.encoders.exported): the model input (rows after the input contract,
# or images after the evaluation transform; a dynamic batch axis) to the real outputs u, a frozen backbone included;
# an image graph also outputs the embedding (the pooled backbone features that an index keeps and makes instance
# codes of), so that a server without torch ranks as the run does. A feature run's embedding is its input rows.

OPSET = 18


def _export_manifest(encoder) -> dict:
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


def _write_onnx(encoder, manifest: dict, path: Path) -> None:
    """The model, traced on a batch of two model inputs, the batch axis dynamic."""
    import torch

    model = encoder.model_.eval()
    # ONNX Runtime computes in float32 on the CPU: the graph is the float32 model (a bf16 backbone's
    # run then differs in a share of its codes by a bit or two, and in most of its rankings: docs/export.md)
    if getattr(model, "bf16_backbone", False):
        from lbhash.errors import LbhashWarning

        warnings.warn(f"{encoder.run_dir_}: its backbone computes in bf16 but the export computes in float32 "
                      "(ONNX Runtime's CPU provider), so its codes and rankings differ from the run's for a share of "
                      "queries (docs/export.md, \"Exactness\"); a run trained with --backbone-precision fp32 "
                      "exports as it answers", LbhashWarning, stacklevel=2)
    model.bf16_backbone = False
    outputs = [OUTPUT_NAME]
    if encoder.input_kind_ == "images":
        size = manifest["images"]["size"]
        example = torch.zeros(2, 3, size, size)
        model, outputs = _embedded_model(model), [OUTPUT_NAME, EMBEDDING_NAME]
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
            program = torch.onnx.export(model, (example,), input_names=[INPUT_NAME], output_names=outputs,
                                        dynamic_shapes=({0: batch},), opset_version=OPSET, dynamo=True,
                                        verbose=False, optimize=True)
    finally:
        for log, level in zip(loggers, levels):
            log.setLevel(level)
    program.save(str(path))


def _embedded_model(model):
    """`model` whose forward gives (u, embedding) (`HashModel.forward_embedded`, the forward pass that a run's
    encoder gives both from), for the exporter, which traces `forward`."""
    import torch

    class Embedded(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner.forward_embedded(x)

    return Embedded(model).eval()


def _nothing_left(out: Path, epochs: int | None) -> bool:
    """Verify the files of a run to resume; True when it has nothing left to train: it is
    finished, or it stopped after its codes were written (and `epochs` asks for no more)."""
    if (out / MANIFEST).is_file():  # finished: every file must still be what it wrote
        verify_finished_run(out)
        return epochs is None
    verify_files(out, (CONFIG, SPLIT, CHECKPOINT))
    return epochs is None and (out / CODES).is_file()


def _left_as_it_is(out: Path) -> dict[str, Any]:
    """A finished run's metrics, with a line saying that it was left as it is; a run that
    stopped after its codes gets its metrics and manifest."""
    if not (out / MANIFEST).is_file():  # killed between its codes and its metrics
        metrics = finish_run(out)
        logger.info(result_line(metrics, out))
        return metrics
    cfg, metrics = load_run_config(out), read_metrics(out)
    trained = metrics.get("run", {}).get("epochs_trained", cfg.recipe.epochs)
    early = f" (stopped early: patience {cfg.recipe.patience})" if trained < cfg.recipe.epochs else ""
    logger.info("%s: already finished at epoch %d%s; nothing to do (--epochs N trains it further)",
                out, trained, early)
    return metrics


def _resumed_config(out: Path, epochs: int | None) -> RunConfig:
    cfg = load_run_config(out)
    if epochs is not None:  # checked before the run changes, and before a model is built
        check_extension(cfg.recipe, epochs, str(out))
        saved_epochs, cfg = cfg.recipe.epochs, cfg.replace(epochs=epochs)  # closed-form methods refuse any but 1
        if (out / MANIFEST).is_file():  # finished and verified: its metrics say what it trained
            trained = read_metrics(out).get("run", {}).get("epochs_trained", saved_epochs)
            check_further(cfg.recipe, epochs, trained, trained < saved_epochs, str(out))
    return cfg
