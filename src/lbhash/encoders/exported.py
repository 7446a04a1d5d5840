"""A run exported by `lbhash export` (docs/export.md), encoding with ONNX Runtime and numpy, no
torch: an export directory holds `model.onnx` and `export.json` (EXPORT_FORMAT: the input contract,
the evaluation transform, bits, the model's identity, the run's summary and the ONNX file's
SHA-256). lbhash.encoders.Encoder checks and batches the inputs; here, the evaluation transform in
numpy (lbhash.data.eval_images) and the ONNX Runtime call.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np

from lbhash._io import file_sha256
from lbhash.data import HashDataset
from lbhash.data.eval_images import eval_inputs
from lbhash.data.input_form import InputForm
from lbhash.encoders import INPUT_KINDS, Encoder
from lbhash.errors import InputError, require_extra

EXPORT_FORMAT = "lbhash-export/1"
MANIFEST, MODEL = "export.json", "model.onnx"
EXPORT_DIR = "export"  # a run's own export: RUN/export (lbhash export's default --out)
INPUT_NAME, OUTPUT_NAME = "input", "u"
EMBEDDING_NAME = "embedding"  # an image graph's second output (manifest onnx.embedding), the pooled backbone features
BATCH = {"features": 1024, "images": 64}  # rows per ONNX Runtime call


def export_dir_of(path: str | Path) -> Path:
    """The export directory `path` names: an export itself, or a run directory holding one."""
    path = Path(path)
    if (path / MANIFEST).is_file():
        return path
    if (path / EXPORT_DIR / MANIFEST).is_file():
        return path / EXPORT_DIR
    if not path.exists():
        raise InputError(f"{path}: no such export directory")
    raise InputError(f"{path}: not an export (no {MANIFEST}, nor {EXPORT_DIR}/{MANIFEST}); "
                     f"make one with `lbhash export RUN_DIR`")


def read_manifest(path: str | Path) -> dict:
    """The checked export.json of an export directory (or of a run directory's export)."""
    where = export_dir_of(path) / MANIFEST
    try:
        manifest = json.loads(where.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"{where}: not readable as JSON ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != EXPORT_FORMAT:
        got = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise InputError(f"{where}: not an lbhash export of format {EXPORT_FORMAT} (format {got!r})")
    form = InputForm.from_dict(manifest.get("input") or {}, str(where))
    bits = manifest.get("bits")
    if isinstance(bits, bool) or not isinstance(bits, int) or bits < 1 or form.kind not in INPUT_KINDS:
        raise InputError(f"{where}: bits {bits!r} and input kind {form.kind!r} are not an encoder's")
    if form.kind == "images" and not isinstance(manifest.get("images"), dict):
        raise InputError(f"{where}: an image export without its transform ('images')")
    embedding = (manifest.get("onnx") or {}).get("embedding")
    if embedding is not None and (form.kind != "images" or not isinstance(embedding, str)):
        raise InputError(f"{where}: onnx.embedding {embedding!r} is not an image graph's output name")
    return manifest


def current_export(run_dir: str | Path) -> Path | None:
    """The run's own export (RUN/export) where it encodes as the run does, so that a search or server
    given the run need not import torch (most of its start): made in this run directory from the weights
    it encodes with now (the weights file the export names still has the SHA-256 it recorded: a run that
    trained on rewrote it), from a float32 model (a bf16 backbone's export answers in float32: other
    codes), with the embedding output an image index ranks by, and ONNX Runtime installed. Else None: the
    run's torch model. A broken export is left to `--encoder` to name."""
    import importlib.util

    run_dir, folder = Path(run_dir), Path(run_dir) / EXPORT_DIR
    if not (folder / MANIFEST).is_file() or importlib.util.find_spec("onnxruntime") is None:
        return None
    try:
        manifest = read_manifest(folder)
    except InputError:
        return None
    model = manifest.get("model") if isinstance(manifest.get("model"), dict) else {}
    name = model.get("file")
    if not isinstance(name, str) or Path(name).name != name or model.get("run") != str(run_dir.resolve()) or \
            manifest.get("run_precision") != "fp32" or not (run_dir / name).is_file() or \
            (manifest["input"]["kind"] == "images" and not (manifest.get("onnx") or {}).get("embedding")):
        return None
    return folder if file_sha256(run_dir / name) == model.get("sha256") else None


class ExportedEncoder(Encoder):
    """`lbhash.encoders.Encoder` over an export directory: `ExportedEncoder.load(path)`."""

    def __init__(self, directory: Path, manifest: dict, session):
        self.directory, self.manifest, self.session = directory, manifest, session
        self.input_form_ = InputForm.from_dict(manifest["input"], str(directory / MANIFEST))
        self.bits_, self.input_kind_ = int(manifest["bits"]), self.input_form_.kind
        self.n_features_in_ = self.input_form_.width if self.input_kind_ == "features" else None
        # an image graph outputs the embedding beside u where the manifest names it; one exported before it did
        # ends at the hash layer (a feature export's embeddings are its conformed rows)
        self.embedding_output_ = (manifest.get("onnx") or {}).get("embedding") if self.input_kind_ == "images" else None
        if self.input_kind_ == "images" and self.embedding_output_ is None:
            self.no_embeddings_ = (f"{directory}: this export of an image run outputs the hash layer only (it was made "
                                   "before exports carried the embedding), so it cannot re-score nor rank by the "
                                   "instance codes: search in Hamming order (--no-rescore, rescore false), search with "
                                   "--run, or export the run again (lbhash export RUN --overwrite)")

    @classmethod
    def load(cls, path: str | Path, threads: int | None = None) -> "ExportedEncoder":
        """The encoder of an export directory, or of a run directory's export; `threads`: ONNX
        Runtime's intra-op threads (None: its default, one per core)."""
        directory = export_dir_of(path)
        manifest = read_manifest(directory)
        model = directory / MODEL
        if not model.is_file():
            raise InputError(f"{model}: missing (the export is incomplete)")
        if file_sha256(model) != (manifest.get("onnx") or {}).get("sha256"):
            raise InputError(f"{model}: its SHA-256 does not match {MANIFEST}; the file was changed or is corrupt")
        require_extra("an exported encoder", "serve", "onnxruntime")
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3  # errors only: no warnings on stderr per session
        if threads is not None:
            options.intra_op_num_threads = threads
        try:
            session = onnxruntime.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        except Exception as err:  # ONNX Runtime raises its own classes for a file it cannot run
            raise InputError(f"{model}: ONNX Runtime cannot load it ({str(err).splitlines()[0]})") from None
        encoder = cls(directory, manifest, session)
        if manifest.get("run_precision") == "bf16":
            from lbhash.errors import LbhashWarning

            warnings.warn(f"{directory}: exported from a run whose backbone computes in bf16; the export computes in "
                          "float32, so its codes and rankings differ from the run's for a share of queries "
                          "(docs/export.md, \"Exactness\")", LbhashWarning, stacklevel=2)
        names = [out.name for out in session.get_outputs()]
        for name in (OUTPUT_NAME, encoder.embedding_output_):
            if name is not None and name not in names:
                raise InputError(f"{model}: the graph has no output {name!r} (its outputs: {', '.join(names)}), "
                                 f"which {MANIFEST} names; export the run again")
        return encoder

    def _forward(self, inputs, embedded: bool, batch_size: int | None) -> tuple[np.ndarray, np.ndarray | None]:
        if isinstance(inputs, HashDataset):
            if self.input_kind_ == "features":
                inputs = inputs.x
            elif len(inputs):
                inputs = np.stack([inputs.image(i) for i in range(len(inputs))])
            else:
                inputs = np.empty((0, 1, 1, 3), np.uint8)
        step = batch_size or BATCH[self.input_kind_]
        graph_embeds = embedded and self.embedding_output_ is not None  # an image graph's pooled features
        names = [OUTPUT_NAME, self.embedding_output_] if graph_embeds else [OUTPUT_NAME]
        parts = [self.session.run(names, {INPUT_NAME: self._model_input(inputs[i:i + step])})
                 for i in range(0, len(inputs), step)]
        u = np.concatenate([p[0] for p in parts]) if parts else np.empty((0, self.bits_), np.float32)
        if not embedded:
            return u, None
        if not graph_embeds:  # a feature run: its embeddings are its conformed rows
            return u, np.asarray(inputs, np.float32)
        return u, (np.concatenate([p[1] for p in parts]) if parts else np.empty((0, 1), np.float32))

    def identity(self) -> dict | None:
        return self.manifest.get("model")

    def run_info(self) -> dict | None:
        return self.manifest.get("run")

    def _model_input(self, batch: np.ndarray) -> np.ndarray:
        if self.input_kind_ == "features":
            return np.ascontiguousarray(batch, np.float32)
        images = self.manifest["images"]
        return eval_inputs(batch, images["preset"], int(images["size"]), images["mean"], images["std"])
