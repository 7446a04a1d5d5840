"""`lbhash encode`: codes of a data set with a trained run's model."""

from __future__ import annotations

from pathlib import Path

import click

from lbhash.cli.common import shown


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--data", help="Data spec to encode (see docs/data.md); labels are not needed, and feature rows go "
                            "through the run's input contract. [default: the run's own data]")
@click.option("--images", "image_paths", multiple=True, type=click.Path(path_type=Path),
              help="Instead of --data: an image file, a folder of image files (its subfolders too; labelled by "
                   "its class folders where it is a class-folder tree), or an image array (a .npz/.npy/.mat file "
                   "of uint8 images, or an image-array:PATH data spec) (repeatable): what `lbhash search --images` "
                   "takes, encoded in the order given.")
@click.option("--part", type=click.Choice(["all", "train", "query", "database"]), default="all",
              show_default=True, help="With the run's own data: which part of its split.")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Output .npz file.")
@click.option("--accelerator", type=click.Choice(["cpu", "gpu"]), default="cpu", show_default=True)
@click.option("--devices", type=click.IntRange(min=1), default=1, show_default=True,
              help="Processes (devices) that share the items; rank 0 writes the file.")
@click.option("--precision", default="32-true", show_default=True,
              help="On a GPU: 32-true gives the run's own codes bit for bit (training writes them in float32); "
                   "bf16-mixed or 16-mixed are faster, and about 1% of items then differ by a bit or two. "
                   "The CPU always uses float32.")
@click.option("--real", is_flag=True,
              help="Also save the model's real-valued outputs (key 'real', float32 (n, bits)), whose signs are "
                   "the codes: the input of asymmetric ranking.")
@click.option("--embeddings", is_flag=True,
              help="Also save each item's embedding from the same forward pass (key 'embeddings', float32 (n, d): "
                   "the pooled backbone features, or the input features), which `lbhash index build|add` keep "
                   "to re-score searches (docs/search.md).")
@click.option("--skip-bad-images", is_flag=True, help="Leave unreadable images out (counted; their ids are missing "
                                                      "from the file), as `lbhash train --skip-bad-images` does; a "
                                                      "run trained with it does so on its own data.")
@click.option("--overwrite", is_flag=True, help="Replace --out if it exists.")
@click.option("--progress/--no-progress", default=True, show_default=True)
def encode(run_dir: Path, data: str | None, image_paths: tuple[Path, ...], part: str, out: Path, accelerator: str, devices: int,
           precision: str, real: bool, embeddings: bool, skip_bad_images: bool, overwrite: bool, progress: bool) -> None:
    """Encode data with the model of RUN_DIR into a codes file (docs/evaluation.md#codes-files).

    The file holds one part: `codes` (packed uint8, FAISS bit layout), `ids` (the items'
    positions in the data), `labels` (when the data has them), `sources` (the file or archive
    member of image items), `bits`, and `topk`, the R of the run's protocol; with --real also
    `real`, the real outputs of the same forward pass (the codes are their signs, 0 -> +1), and
    with --embeddings also `embeddings`, each item's embedding from that pass.
    `lbhash evaluate`, `lbhash index build|add` and `lbhash search --codes` read it as it is.
    """
    from lbhash.runs import RunDirectory

    encoded = RunDirectory(run_dir).encode(data, part, accelerator, precision, devices, progress, real=real,
                                           embeddings=embeddings, out=out, overwrite=overwrite, images=image_paths,
                                           skip_bad_images=skip_bad_images)
    if encoded is None:  # another rank of a multi-process run
        return
    click.echo(f"encoded {len(encoded['codes'])} items to {encoded['bits']}-bit codes: {shown(out)}")
