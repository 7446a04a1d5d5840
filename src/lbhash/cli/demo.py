"""`lbhash demo`: the main job on the embedded default data set (scikit-learn's digits)."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.option("--out", type=click.Path(path_type=Path), default=Path("runs/demo"), show_default=True,
              help="Directory for the codes files and metrics.")
@click.option("--seed", default=0, show_default=True, type=int)
def demo(out: Path, seed: int) -> None:
    """Hash the bundled digits data set and evaluate the codes.

    BASELINE ONLY: the codes are signs of PCA projections (no learning). Learned codes
    (CSQ and CSQ_D) replace this once training lands.
    """
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.decomposition import PCA

    from lbhash._io import write_json
    from lbhash.codes import save_codes_file, to_signs
    from lbhash.evaluate import evaluate_codes

    digits = load_digits()
    x, y = digits.data.astype(np.float64), digits.target
    rng = np.random.default_rng(seed)
    is_query = np.zeros(len(y), dtype=bool)
    for c in np.unique(y):  # 20 queries per class, the rest is the database
        is_query[rng.choice(np.flatnonzero(y == c), size=20, replace=False)] = True
    click.echo("BASELINE: sign of PCA projections fitted on the database (no learning), "
               f"scikit-learn digits: {is_query.sum()} queries, {(~is_query).sum()} database items")
    click.echo(f"{'bits':>4}  {'mAP@all':>8}  {'P@H<=2':>7}  {'kNN acc':>7}  {'LB ratio':>8}")
    for bits in (16, 32, 64):
        pca = PCA(n_components=bits, random_state=seed).fit(x[~is_query])
        codes = to_signs(pca.transform(x))
        save_codes_file(out / f"pca{bits}" / "codes.npz", codes[is_query], codes[~is_query],
                        y[is_query], y[~is_query])
        m = evaluate_codes(codes[is_query], codes[~is_query], y[is_query], y[~is_query])
        write_json(out / f"pca{bits}" / "metrics.json", m)
        ratio = m["lower_bound"]["ratio"]
        click.echo(f"{bits:>4}  {m['map']:>8.4f}  {m['precision_within_radius']['precision']:>7.4f}  "
                   f"{m['knn_accuracy']['accuracy']:>7.4f}  {ratio if isinstance(ratio, str) else f'{ratio:.3f}':>8}")
    click.echo(f"codes and metrics in {out}/pca*/ (re-evaluate with: lbhash evaluate {out}/pca64/codes.npz)")
