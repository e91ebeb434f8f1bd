"""The corpus's label distribution from the tasks labelled so far, with 95% intervals.

Pure and vectorised; the method, its formulas and assumptions are in docs/domains.md:
the finished shards' tasks are a random sample of clusters, each cell's share a
post-stratified ratio estimate with a linearised variance and a logit-scale interval.
"""

import math
from dataclasses import dataclass, field
from typing import Self

import numpy as np

#: A category with fewer labelled tasks (and not complete) is pooled with the others
#: like it: a variance from two or three tasks is too noisy to weight on its own.
MIN_STRATUM_TASKS = 15
#: One-sided tail of a two-sided 95% interval.
TAIL = 0.025
#: Fewest degrees of freedom an interval uses (a cell seen in one task: t = 4.30)
MIN_DF = 2.0
#: Student t 97.5% quantiles for 1..30 degrees of freedom.
_T975 = np.array(
    [
        12.7062047,
        4.30265273,
        3.18244631,
        2.77644511,
        2.57058184,
        2.44691185,
        2.36462425,
        2.30600414,
        2.26215716,
        2.22813885,
        2.20098516,
        2.17881283,
        2.16036866,
        2.14478669,
        2.13144955,
        2.11990530,
        2.10981558,
        2.10092204,
        2.09302405,
        2.08596345,
        2.07961384,
        2.07387307,
        2.06865761,
        2.06389856,
        2.05953855,
        2.05552944,
        2.05183052,
        2.04840714,
        2.04522964,
        2.04227246,
    ]
)
_Z975 = 1.959963984540054


def t975(df: np.ndarray | float) -> np.ndarray:
    """Student t 97.5% quantile (fractional df rounded down: wider, never narrower): a
    table to 30 df, Cornish-Fisher above (error < 1e-5), the normal quantile at infinity."""
    d = np.floor(np.maximum(np.asarray(df, dtype=np.float64), 1.0))
    z = _Z975
    with np.errstate(divide="ignore", invalid="ignore"):
        cf = (
            z
            + (z**3 + z) / (4 * d)
            + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * d**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * d**3)
            + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * d**4)
        )
    small = np.clip(d, 1, 30).astype(np.int64) - 1
    out = np.where(d <= 30, _T975[small], cf)
    return np.where(np.isinf(d), z, out)


@dataclass(frozen=True, eq=False)
class Population:
    """Every task of the plan (quarantined ones left out by the caller)."""

    categories: list[str]
    task_category: np.ndarray  # int64 index into categories, one per task
    task_bytes: np.ndarray  # float64 input bytes of each task (plan)


@dataclass(frozen=True, eq=False, kw_only=True)
class Sample:
    """What is labelled: per task its total, per (task, cell) the amount in the cell (in
    the weight's unit); tasks not labelled have no rows in ``cell_task``."""

    labelled: np.ndarray  # bool, one per task
    task_total: np.ndarray  # float64, n_i (0 where not labelled)
    cell_task: np.ndarray  # int64 task index of each row
    cell: np.ndarray  # int64 cell index of each row
    value: np.ndarray  # float64 y (> 0)
    n_cells: int
    #: Documents of each task (0 where not labelled), for the variance floor; None: the
    #: totals are documents.
    task_docs: np.ndarray | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class CategoryEstimate:
    """Per-category shares (one row per category, one column per cell); NaN = no task."""

    share: np.ndarray  # (H, C)
    low: np.ndarray
    high: np.ndarray
    total: np.ndarray  # estimated documents (or bytes) of the category in the cell
    tasks_labelled: np.ndarray  # (H,)
    tasks_total: np.ndarray  # (H,)
    estimated_total: np.ndarray  # (H,) documents (or bytes) of the category


@dataclass(frozen=True, eq=False, kw_only=True)
class Estimate:
    """Shares of each cell over the corpus, with 95% intervals and totals."""

    share: np.ndarray  # (C,)
    low: np.ndarray
    high: np.ndarray
    total: np.ndarray  # share x estimated corpus total
    tasks_total: int
    tasks_labelled: int
    corpus_total: float  # estimated documents (or bytes) of the whole corpus
    corpus_low: float
    corpus_high: float
    exact: bool  # every task labelled: the shares are counts, not estimates
    uncovered: list[str]  # categories with no labelled task
    uncovered_weight: float  # their estimated share of the corpus (0..1)
    by_category: CategoryEstimate
    warnings: list[str] = field(default_factory=list)

    @property
    def fraction_labelled(self) -> float:
        """Labelled tasks / tasks (0..1)."""
        return self.tasks_labelled / self.tasks_total if self.tasks_total else 1.0

    @property
    def half_width(self) -> float:
        """The widest half interval over the cells seen (the figure's "95% CI +-x")."""
        seen = np.nan_to_num(self.share) > 0
        if not seen.any():
            return 0.0
        return float(np.max((self.high - self.low)[seen] / 2.0))

    @property
    def unseen_upper(self) -> float:
        """Upper 95% bound of a cell seen in no labelled task (0 when all is labelled)."""
        unseen = ~(np.nan_to_num(self.share) > 0)
        return float(np.max(self.high[unseen])) if unseen.any() else 0.0


@dataclass(frozen=True, eq=False, kw_only=True)
class _Sums:
    """Per-stratum (rows) sums over labelled tasks; per (stratum, cell) sums of y."""

    M: np.ndarray  # tasks
    m: np.ndarray  # labelled tasks
    B: np.ndarray  # input bytes, all tasks
    S: np.ndarray  # input bytes, labelled tasks
    N: np.ndarray  # sum n
    NN: np.ndarray  # sum n^2
    SS: np.ndarray  # sum s^2
    NS: np.ndarray  # sum n s
    Y: np.ndarray  # (G, C) sum y
    YY: np.ndarray  # sum y^2
    YN: np.ndarray  # sum y n
    YS: np.ndarray  # sum y s
    D: np.ndarray  # labelled documents (the variance floor's sample size)
    K: np.ndarray  # (G, C) labelled tasks with y > 0
    KF: np.ndarray  # labelled tasks with y == n (all of the task in the cell)

    def grouped(self, group: np.ndarray, n_groups: int) -> Self:
        """Sums of the rows mapped to each group (strata pooled); rows < 0 dropped."""
        keep = group >= 0

        def vec(a: np.ndarray) -> np.ndarray:
            return np.bincount(group[keep], weights=a[keep], minlength=n_groups)

        def mat(a: np.ndarray) -> np.ndarray:
            out = np.zeros((n_groups, a.shape[1]))
            np.add.at(out, group[keep], a[keep])
            return out

        return _Sums(
            **{k: vec(getattr(self, k)) for k in ("M", "m", "B", "S", "N", "NN", "SS", "NS", "D")},
            **{k: mat(getattr(self, k)) for k in ("Y", "YY", "YN", "YS", "K", "KF")},
        )


def _sums(pop: Population, sample: Sample) -> _Sums:
    h = pop.task_category.astype(np.int64)
    H, C = len(pop.categories), int(sample.n_cells)
    lab = sample.labelled.astype(bool)
    s = pop.task_bytes.astype(np.float64)
    n = np.where(lab, sample.task_total.astype(np.float64), 0.0)
    docs = n if sample.task_docs is None else np.where(lab, sample.task_docs, 0.0)

    def per_h(w: np.ndarray) -> np.ndarray:
        return np.bincount(h, weights=w, minlength=H)

    t = np.asarray(sample.cell_task, dtype=np.int64)  # asarray: no copy of 10M rows
    y = np.asarray(sample.value, dtype=np.float64)
    key = h[t] * C + np.asarray(sample.cell, dtype=np.int64)
    size = H * C

    def per_hc(w: np.ndarray | None) -> np.ndarray:
        return np.bincount(key, weights=w, minlength=size).reshape(H, C).astype(np.float64)

    return _Sums(
        M=per_h(np.ones_like(s)),
        m=per_h(lab.astype(np.float64)),
        B=per_h(s),
        S=per_h(np.where(lab, s, 0.0)),
        N=per_h(n),
        NN=per_h(n * n),
        SS=per_h(np.where(lab, s * s, 0.0)),
        NS=per_h(n * s),
        D=per_h(docs),
        Y=per_hc(y),
        YY=per_hc(y * y),
        YN=per_hc(y * n[t]),
        YS=per_hc(y * s[t]),
        K=per_hc(None),
        KF=per_hc((y >= n[t]).astype(np.float64)),
    )


def _scale(x: _Sums) -> np.ndarray:
    """B_g / S_g: input bytes per labelled input byte (expansion factor of each stratum)."""
    return np.divide(x.B, x.S, out=np.zeros_like(x.B), where=x.S > 0)


def _var_terms(x: _Sums, p: np.ndarray) -> np.ndarray:
    """Per (stratum, cell) variance contribution of ``T_c - p T`` (see module doc)."""
    S = x.S[:, None]
    N = x.N[:, None]
    R = np.divide(x.Y - p * N, S, out=np.zeros_like(x.Y), where=S > 0)
    d2 = x.YY - 2 * p * x.YN - 2 * R * x.YS + p * p * x.NN[:, None]
    d2 = np.maximum(d2 + 2 * p * R * x.NS[:, None] + R * R * x.SS[:, None], 0.0)
    m = x.m
    fpc = np.clip(1.0 - np.divide(m, x.M, out=np.ones_like(m), where=x.M > 0), 0.0, 1.0)
    factor = np.divide(fpc * _scale(x) ** 2 * m, m - 1, out=np.zeros_like(m), where=m > 1)
    return factor[:, None] * d2


def _interval(
    p: np.ndarray,
    var: np.ndarray,
    df: np.ndarray,
    *,
    k: np.ndarray,
    kf: np.ndarray,
    m: np.ndarray,
    M: np.ndarray,
    docs: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """95% bounds; arrays broadcast (cells, or categories x cells). On the logit scale (a
    rare cell's estimate is skewed: a symmetric interval misses high far more often), the
    variance floored at a simple random sample's of the ``docs`` labelled documents."""
    complete = m >= M
    fpc = np.clip(1.0 - np.divide(m, M, out=np.ones(np.broadcast(m, M).shape), where=M > 0), 0, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        floor = np.divide(
            fpc * p * (1.0 - p), docs, out=np.zeros(np.broadcast(p, docs).shape), where=docs > 0
        )
    var = np.maximum(var, floor)
    t = t975(np.minimum(df, np.maximum(np.minimum(k, m - kf), MIN_DF)))
    inside = (p > 0) & (p < 1) & (var > 0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        q = np.where(inside, p, 0.5)
        half = t * np.sqrt(np.maximum(var, 0.0)) / (q * (1.0 - q))
        centre = np.log(q / (1.0 - q))
        low = np.where(inside, 1.0 / (1.0 + np.exp(half - centre)), p)
        high = np.where(inside, 1.0 / (1.0 + np.exp(-centre - half)), p)
    # Seen in no labelled task (or in all of each): a bound from the number of tasks.
    f = np.divide(m, M, out=np.ones(np.broadcast(m, M).shape), where=M > 0)
    with np.errstate(divide="ignore"):
        m_eff = np.divide(m, 1.0 - f, out=np.full(f.shape, np.inf), where=f < 1)
        bound = np.where(np.isinf(m_eff), 0.0, 1.0 - TAIL ** (1.0 / np.maximum(m_eff, 1e-12)))
    high = np.where(k == 0, np.maximum(high, bound), high)
    low = np.where(kf >= m, np.minimum(low, 1.0 - bound), low)
    # Fewer than two labelled tasks: no variance can be estimated at all.
    few = (m < 2) & ~complete
    low = np.where(few, 0.0, low)
    high = np.where(few, 1.0, high)
    exact = complete & np.isfinite(p)
    return np.where(exact, p, low), np.where(exact, p, high)


def _satterthwaite(terms: np.ndarray, dof: np.ndarray) -> np.ndarray:
    """Degrees of freedom of a sum of per-stratum variance terms (cells in columns; ``dof``:
    each term's own, strata in rows)."""
    dof = np.maximum(dof, 1.0)
    num = terms.sum(axis=0) ** 2
    den = (terms**2 / dof).sum(axis=0)
    return np.divide(num, den, out=np.full(num.shape, np.inf), where=den > 0)


def _strata(x: _Sums) -> tuple[np.ndarray, int, list[int]]:
    """Map categories to strata: own, pooled (few tasks), or -1 (no labelled task)."""
    m, M = x.m, x.M
    own = (m >= MIN_STRATUM_TASKS) | ((m >= M) & (m > 0))
    small = (m > 0) & ~own
    group = np.full(m.size, -1, np.int64)
    own_idx = np.flatnonzero(own)
    group[own_idx] = np.arange(own_idx.size)
    n_groups = int(own_idx.size)
    if small.any():
        if m[small].sum() >= 2 or n_groups == 0:
            group[small] = n_groups
            n_groups += 1
        else:  # a lone task: pool it with the largest stratum rather than leave m = 1
            group[small] = int(group[own_idx[np.argmax(m[own_idx])]])
    return group, n_groups, np.flatnonzero(m == 0).tolist()


def _by_category(x: _Sums) -> CategoryEstimate:
    T = _scale(x) * x.N  # estimated documents (or bytes) per category
    p = np.divide(x.Y, x.N[:, None], out=np.full(x.Y.shape, np.nan), where=x.N[:, None] > 0)
    p = np.where(x.m[:, None] > 0, p, np.nan)
    terms = _var_terms(x, np.nan_to_num(p))
    var = np.divide(terms, (T**2)[:, None], out=np.zeros_like(terms), where=T[:, None] > 0)
    df = np.minimum(x.m[:, None] - 1.0, np.maximum(np.minimum(x.K, x.m[:, None] - x.KF), MIN_DF))
    low, high = _interval(
        np.nan_to_num(p), var, df, k=x.K, kf=x.KF, m=x.m[:, None], M=x.M[:, None], docs=x.D[:, None]
    )
    none = x.m[:, None] == 0
    return CategoryEstimate(
        share=p,
        low=np.where(none, np.nan, low),
        high=np.where(none, np.nan, high),
        total=p * T[:, None],
        tasks_labelled=x.m.astype(np.int64),
        tasks_total=x.M.astype(np.int64),
        estimated_total=np.where(x.m > 0, T, np.nan),
    )


def estimate(pop: Population, sample: Sample) -> Estimate:
    """Post-stratified shares of every cell, their 95% intervals and estimated totals."""
    per_cat = _sums(pop, sample)
    group, n_groups, uncovered = _strata(per_cat)
    x = per_cat.grouped(group, n_groups)
    C = int(sample.n_cells)
    T_g = _scale(x) * x.N
    T = float(T_g.sum())
    Tc = (_scale(x)[:, None] * x.Y).sum(axis=0) if n_groups else np.zeros(C)
    p = Tc / T if T > 0 else np.zeros(C)
    terms = _var_terms(x, p[None, :]) if n_groups else np.zeros((0, C))
    var = terms.sum(axis=0) / T**2 if T > 0 else np.zeros(C)
    # A stratum's variance of cell c rests on the tasks that hold c (and those that do
    # not): with 3 of 200 tasks holding it, it has ~3 tasks' worth of information.
    dof = np.minimum(x.m[:, None] - 1.0, np.maximum(np.minimum(x.K, x.m[:, None] - x.KF), MIN_DF))
    df = _satterthwaite(terms, dof) if n_groups else np.full(C, np.inf)
    m_cov = float(x.m.sum())
    M_cov = float(x.M.sum())
    k, kf = x.K.sum(axis=0), x.KF.sum(axis=0)
    low, high = _interval(p, var, df, k=k, kf=kf, m=m_cov, M=M_cov, docs=float(x.D.sum()))
    if not per_cat.m.any() and C:
        p, low, high = np.full(C, np.nan), np.zeros(C), np.ones(C)
    # Categories without a labelled task: weight by the covered documents per byte.
    B_unc = float(per_cat.B[uncovered].sum()) if uncovered else 0.0
    ratio = float(x.N.sum() / x.S.sum()) if x.S.sum() > 0 else math.nan
    T_unc = B_unc * ratio if math.isfinite(ratio) else math.nan
    if uncovered and not math.isfinite(T_unc):
        W = 1.0
    else:
        W = T_unc / (T + T_unc) if (T + T_unc) > 0 else 0.0
    if W > 0:
        low, high = (1 - W) * low, (1 - W) * high + W
    corpus = T + (T_unc if math.isfinite(T_unc) else 0.0)
    # The corpus total: a ratio estimate of documents per input byte, per stratum.
    r = np.divide(x.N, x.S, out=np.zeros_like(x.N), where=x.S > 0)
    d2 = np.maximum(x.NN - 2 * r * x.NS + r * r * x.SS, 0.0)
    fpc = np.clip(1 - np.divide(x.m, x.M, out=np.ones_like(x.m), where=x.M > 0), 0, 1)
    num = fpc * _scale(x) ** 2 * x.m * d2
    tot_terms = np.divide(num, x.m - 1, out=np.zeros_like(x.m), where=x.m > 1)
    tot_df = _satterthwaite(tot_terms[:, None], x.m[:, None] - 1.0)[0] if n_groups else np.inf
    tot_half = float(t975(tot_df)) * math.sqrt(float(tot_terms.sum()))
    exact = bool(per_cat.M.size) and bool((per_cat.m >= per_cat.M).all())

    est = Estimate(
        share=p,
        low=low,
        high=high,
        total=p * corpus,
        tasks_total=int(per_cat.M.sum()),
        tasks_labelled=int(per_cat.m.sum()),
        corpus_total=corpus,
        corpus_low=max(corpus - tot_half, float(per_cat.N.sum())),
        corpus_high=corpus + tot_half if W == 0 else math.inf,
        exact=exact,
        uncovered=[pop.categories[i] for i in uncovered],
        uncovered_weight=W,
        by_category=_by_category(per_cat),
    )
    est.warnings.extend(_warnings(est, per_cat, uncovered))
    return est


def _warnings(est: Estimate, x: _Sums, uncovered: list[int]) -> list[str]:
    out: list[str] = []
    if est.tasks_labelled == 0:
        out.append("no task is labelled yet: nothing can be estimated")
        return out
    if uncovered:
        share = float(x.B[uncovered].sum() / x.B.sum()) if x.B.sum() > 0 else 1.0
        more = f" and {len(est.uncovered) - 5} more" if len(est.uncovered) > 5 else ""
        names = ", ".join(est.uncovered[:5]) + more
        text = f"{len(est.uncovered)} categor{'y has' if len(uncovered) == 1 else 'ies have'} "
        text += f"no labelled task yet ({names}; {100 * share:.1f}% of the input bytes): the "
        text += "shares describe the other categories, and every interval is widened by "
        text += f"{100 * est.uncovered_weight:.1f} points to allow any distribution there"
        out.append(text)
    if est.tasks_labelled < 2 and not est.exact:
        out.append("fewer than 2 tasks labelled: intervals are [0, 1]")
    return out
