"""`lbhash toy-mvb`: the paper's MVB toy experiment (Fig. "Toy", App. "Sanity16")."""

from __future__ import annotations

from pathlib import Path

import click

from lbhash.checks import parse_int_list
from lbhash.errors import InputError

INPUTS_NOTE = (
    "Inputs: each training/evaluation sample is a code b in {-1,+1}^bits drawn from the true "
    "joint (softmax of N(0,1) logits over all 2^bits codes); the surrogate sees l = b + sigma*eps, "
    "eps ~ N(0,1) (sigma = --noise; 0 = clean inputs) and is trained with L_pi against bin(l). "
    "Its estimate is the mean over N fresh samples of the product of its block softmaxes "
    "(dropout off). Caveat: bin(l) is a deterministic function of l, so a well-trained surrogate "
    "decodes the sign pattern and its mean over N samples is close to the histogram of those N "
    "samples. That histogram is the sampling floor: infinite while codes with real mass are "
    "unseen, about (K-1)/(2N) once all K codes are seen. The paper's 0.008 from N = 100 samples "
    "of K = 256 codes is below this floor, and below even the floor for N = 10,000 (about 0.013)."
)


@click.command("toy-mvb")
@click.option("--bits", default="both", show_default=True, help="8, 16 (two blocks of 8) or both.")
@click.option("--train-samples", default=10_000, show_default=True, type=int,
              help="Samples the surrogate is trained on.")
@click.option("--eval-samples", default="100,10000,100000", show_default=True,
              help="Numbers N of fresh evaluation samples, comma-separated (one column each).")
@click.option("--noise", default=0.1, show_default=True, type=float,
              help="Std of the Gaussian noise added to the +/-1 codes (0 = clean inputs).")
@click.option("--epochs", default=20, show_default=True, type=int,
              help="Training epochs (Adam, lr 1e-3).")
@click.option("--batch-size", default=64, show_default=True, type=int)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--out", type=click.Path(path_type=Path), default=Path("runs/toy-mvb"), show_default=True,
              help="Directory for toy_mvb.json and the bar plots.")
def toy_mvb(bits: str, train_samples: int, eval_samples: str, noise: float, epochs: int,
            batch_size: int, seed: int, out: Path) -> None:
    """Estimate a random multivariate Bernoulli with the block surrogate P_pi.

    Prints KL(real || estimate) for the surrogate, the naive product of marginals and the
    empirical histogram (the sampling floor) for every N, writes toy_mvb.json and one PNG per
    bit length into --out.
    """
    import time

    from lbhash._io import write_json
    from lbhash.reproduce.toy import ToyConfig, format_table, paper_comparison, plot_toy, run_toy

    # Validate every setting before any training starts
    choices = {"8": [8], "16": [16], "both": [8, 16]}
    if bits.lower() not in choices:
        raise InputError(f"--bits must be 8, 16 or both, got {bits!r}")
    configs = [ToyConfig(bits=b, train_samples=train_samples,
                         eval_samples=tuple(parse_int_list(eval_samples, "--eval-samples")),
                         noise=noise, epochs=epochs, batch_size=batch_size, seed=seed)
               for b in choices[bits.lower()]]
    click.echo(INPUTS_NOTE)
    record = {}
    for cfg in configs:
        start = time.perf_counter()
        result = run_toy(cfg)
        png = out / f"toy_mvb_{cfg.bits}bit.png"
        plot_toy(result, png)
        record[str(cfg.bits)] = {**result.to_dict(), "seconds": time.perf_counter() - start, "plot": png.name}
        click.echo("")
        click.echo(format_table(result))
        for line in paper_comparison(result):
            click.echo(f"  {line}")
        click.echo(f"  ({record[str(cfg.bits)]['seconds']:.1f} s; training {result.train['seconds']:.1f} s, "
                   f"last-epoch pattern accuracy {result.train['final_epoch_pattern_accuracy']:.4f}; "
                   f"plot {png})")
    write_json(out / "toy_mvb.json", record)
    click.echo(f"\nwrote {out / 'toy_mvb.json'}")
