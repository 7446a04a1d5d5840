"""Ordinary least squares with confidence intervals and band, and Spearman's rank correlation.

The report's "mAP vs lower-bound ratio" figure (paper Fig. 5) draws a regression line with a
95% confidence band for the mean response; these are the textbook formulas with Student's t.
"""

from __future__ import annotations

import inspect
import math
import warnings
from typing import NamedTuple

import numpy as np
from lbhash.errors import InputError


class LinearFit(NamedTuple):
    slope: float
    intercept: float
    slope_se: float
    intercept_se: float
    slope_ci: tuple[float, float]
    intercept_ci: tuple[float, float]
    r: float  # Pearson correlation
    r2: float
    p_value: float  # two-sided, for slope = 0 (the same as Pearson's r = 0)
    n: int
    level: float
    residual_sd: float  # s = sqrt(SSE / (n - 2))
    x_mean: float
    sxx: float  # sum of (x - mean x)^2


class RankCorrelation(NamedTuple):
    rho: float
    p_value: float
    n: int


def linear_fit(x, y, level: float = 0.95) -> LinearFit:
    """Fit y = intercept + slope * x by OLS; CIs from the t distribution with n - 2 df."""
    from scipy import stats

    x, y = _pair(x, y, minimum=3)
    if not 0 < level < 1:
        raise InputError(f"level must be in (0, 1), got {level}")
    n = len(x)
    xm, ym = x.mean(), y.mean()
    sxx, syy = np.sum((x - xm) ** 2), np.sum((y - ym) ** 2)
    if sxx == 0:
        raise InputError("linear_fit needs at least two distinct x values")
    sxy = np.sum((x - xm) * (y - ym))
    slope = sxy / sxx
    intercept = ym - slope * xm
    sse = max(float(np.sum((y - intercept - slope * x) ** 2)), 0.0)
    s = math.sqrt(sse / (n - 2))
    slope_se = s / math.sqrt(sxx)
    intercept_se = s * math.sqrt(1 / n + xm ** 2 / sxx)
    t = stats.t.ppf((1 + level) / 2, n - 2)
    r = sxy / math.sqrt(sxx * syy) if syy > 0 else math.nan
    if slope_se > 0:
        p = float(2 * stats.t.sf(abs(slope / slope_se), n - 2))
    else:  # a perfect fit: the slope is exact
        p = 0.0 if slope != 0 else math.nan
    return LinearFit(float(slope), float(intercept), slope_se, intercept_se,
                     (float(slope - t * slope_se), float(slope + t * slope_se)),
                     (float(intercept - t * intercept_se), float(intercept + t * intercept_se)),
                     float(r), float(r * r), p, n, level, s, float(xm), float(sxx))


def confidence_band(fit: LinearFit, x_grid, level: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper limits of the confidence band for the mean response at x_grid."""
    from scipy import stats

    level = fit.level if level is None else level
    if not 0 < level < 1:
        raise InputError(f"level must be in (0, 1), got {level}")
    x = np.asarray(x_grid, dtype=np.float64)
    t = stats.t.ppf((1 + level) / 2, fit.n - 2)
    half = t * fit.residual_sd * np.sqrt(1 / fit.n + (x - fit.x_mean) ** 2 / fit.sxx)
    mean = fit.intercept + fit.slope * x
    return mean - half, mean + half


def spearman(x, y) -> RankCorrelation:
    """Spearman's rho and its two-sided p-value (scipy); NaN when a variable is constant."""
    from scipy import stats

    x, y = _pair(x, y, minimum=2)
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return RankCorrelation(math.nan, math.nan, len(x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # n = 2 has no p-value; scipy warns and gives NaN
        result = stats.spearmanr(x, y)
    return RankCorrelation(float(result.statistic), float(result.pvalue), len(x))


def _pair(x, y, minimum: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise InputError(f"x and y differ in length: {len(x)} and {len(y)}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise InputError("x and y must be finite (drop infinite or missing values first)")
    if len(x) < minimum:
        raise InputError(f"need at least {minimum} points, got {len(x)}")
    return x, y


def mean_std(values) -> tuple[float, float, int]:
    """Mean, sample standard deviation (ddof = 1; NaN for one value) and count, NaNs dropped.

    An infinite value makes the mean infinite and the deviation NaN, without a warning.
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[~np.isnan(v)]
    if len(v) == 0:
        return math.nan, math.nan, 0
    with np.errstate(invalid="ignore"):
        return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else math.nan, len(v)


def group_mean(x, y) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of x and the mean of y over each (NaNs dropped; NaN if none left)."""
    x, y = np.asarray(x), np.asarray(y, dtype=np.float64)
    ux, inv = np.unique(x, return_inverse=True)
    ok = ~np.isnan(y)
    total = np.bincount(inv[ok], y[ok], minlength=len(ux))
    count = np.bincount(inv[ok], minlength=len(ux))
    return ux, np.where(count > 0, total / np.maximum(count, 1), np.nan)


def kl_divergence(p, q) -> float:
    """KL(p || q) = sum_i p_i log(p_i / q_i) in nats; +inf if q_i = 0 where p_i > 0."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    if p.shape != q.shape or p.ndim != 1:
        raise InputError(f"KL needs two vectors of the same length, got {p.shape} and {q.shape}")
    if not (np.isfinite(p).all() and np.isfinite(q).all()) or (p < 0).any() or (q < 0).any():
        raise InputError("KL needs finite non-negative probabilities")
    support = p > 0
    if (q[support] == 0).any():
        return math.inf
    return float(np.sum(p[support] * (np.log(p[support]) - np.log(q[support]))))


def tsne_embedding(codes, labels, max_points: int = 5000, seed: int = 0, max_iter: int = 500
                   ) -> tuple[np.ndarray, np.ndarray]:
    """2-D t-SNE of +/-1 codes (a seeded subsample of at most max_points) and their classes.

    Multi-hot labels give each point its first label (-1 when it has none). Euclidean
    distance between +/-1 codes is 2 sqrt(Hamming), so the neighbours are Hamming's.
    """
    from sklearn.manifold import TSNE
    from threadpoolctl import threadpool_limits

    codes, labels = np.asarray(codes), np.asarray(labels)
    if len(codes) > max_points:
        keep = np.sort(np.random.default_rng(seed).choice(len(codes), max_points, replace=False))
        codes, labels = codes[keep], labels[keep]
    if len(codes) < 5:
        raise InputError(f"t-SNE needs at least 5 codes, got {len(codes)}")
    classes = labels if labels.ndim == 1 else np.where(labels.any(1), labels.argmax(1), -1)
    # 500 iterations (sklearn's default is 1000) end at nearly the same KL in half the time
    steps = "max_iter" if "max_iter" in inspect.signature(TSNE).parameters else "n_iter"
    tsne = TSNE(2, init="pca", perplexity=min(30.0, (len(codes) - 1) / 3), random_state=seed,
                learning_rate="auto", **{steps: max_iter})
    # small inputs: OpenMP hand-offs dominate, and on a busy machine they stall the fit
    with threadpool_limits(1 if len(codes) < 2000 else None):
        return tsne.fit_transform(codes.astype(np.float32)), classes
