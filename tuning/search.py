"""Bayesian optimisation over a workload's MetaSchedule design space, as a search strategy.

Each round the strategy grows a pool of candidates (random replays of the design space and
mutations of the best schedules so far; with `generations`, also a few generations evolved, as
EvolutionarySearch evolves its population, from the unmeasured candidates the surrogate's
posterior ranks fastest), scores every unmeasured one with a surrogate and an acquisition
function, and hands only the best `num_trials_per_iter` to MetaSchedule to build and measure;
the results refit the surrogate. Four surrogates:

- "prior-gp": the learned cost model's predicted log-latency is the prior mean, and a Gaussian
  process over the network's graph embeddings, fitted on this run's measurements, models the
  residual and its uncertainty. Before any measurement the ranking is the model's.
- "prior-mix": as prior-gp, but the prior mixes every model shipped for the target (the
  network, its tree companion, the XGBModel pretrained on the same records), each
  standardised and weighted by how well it ranks this run's own measurements so far (its
  Kendall tau, none for a model that ranks them no better than chance): a model that is wrong
  about this workload loses its say, and with every weight at zero the search leans on the GP
  and on exploration alone.
- "prior-learn": as prior-gp, but the prior's XGBModel (the checkpoint's companion) keeps
  learning: at each refit it trains a few more boosting rounds on this run's measurements (of
  every task, where the run tunes a network), as MetaSchedule's XGBModel does in tuning, and
  the blend is recomputed with it.
- "forest": ytopt's recipe, no prior: a random forest over the schedule's sampled decisions,
  its spread across trees as the uncertainty, candidates drawn at random from the space.

Because it is a MetaSchedule `PySearchStrategy`, `tune_tir(..., strategy=BayesOptSearch(...))`
and relax tuning keep MetaSchedule's task scheduler, builder, runner, database and callbacks.
"""

from __future__ import annotations

import json
import math
import warnings
from typing import NamedTuple

import numpy as np
from scipy.stats import norm
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate, PySearchStrategy

from costmodel.registry import Registry
from datagen.errors import UserError
from datagen.measure import run_latency
from datagen.sampler import ScheduleSampler, derive_seed

# a surrogate: (predictor, seed) -> a `Surrogate` (features, fit, posterior; see PriorGP)
SURROGATES = Registry("surrogate")
ACQUISITIONS = ("ei", "lcb")
PRIOR_SIGMA = 0.3  # log-latency uncertainty of the prior before any measurement
GP_MAX_DIMS = 16  # embeddings are projected onto this many principal components


class Surrogate:
    """What `BayesOptSearch` fits each round: `features` of candidates, `fit` on the measured
    ones, `posterior` over the pool. `needs_model`: it reads the predictor (a checkpoint)."""

    needs_model = False

    def __init__(self, predictor, seed: int):
        self.predictor, self.seed = predictor, seed

    @staticmethod
    def check(predictor) -> None:
        """Raise `UserError` if it cannot work with `predictor` (before any tuning starts)."""


@SURROGATES.register("prior-gp")
class PriorGP(Surrogate):
    """Learned prior mean plus a GP on the residual, over the network's graph embeddings."""

    needs_model = True

    def __init__(self, predictor, seed: int):
        super().__init__(predictor, seed)
        self.gp, self.project, self.offset = None, None, 0.0

    def features(self, cands) -> tuple[np.ndarray, np.ndarray]:
        """(embeddings, prior log-latency) of candidates."""
        seconds, emb = self.predictor.score_schedules([c.sch for c in cands])
        return list(emb.astype(np.float64)), np.log(seconds)

    def fit(self, x_all: list, x: list, prior: np.ndarray, y: np.ndarray) -> None:
        """Fit on measured rows `x` (prior, log-latency `y`); `x_all` also holds the pool."""
        from sklearn.decomposition import PCA
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        residual = y - prior
        self.offset = float(residual.mean()) if len(y) else 0.0
        self.gp = None
        if len(y) < 3:
            return
        x_all = np.stack(x_all)
        dims = min(GP_MAX_DIMS, *x_all.shape)
        self.project = make_pipeline(StandardScaler(), PCA(dims, random_state=self.seed))
        self.project.fit(x_all)
        z = self.project.transform(np.stack(x))
        kernel = (ConstantKernel(PRIOR_SIGMA ** 2, (1e-4, 1e1))
                  * RBF(math.sqrt(dims), (1e-2, 1e3)) + WhiteKernel(1e-3, (1e-6, 1e0)))
        self.gp = GaussianProcessRegressor(kernel, normalize_y=False, random_state=self.seed,
                                           n_restarts_optimizer=2)
        with warnings.catch_warnings():  # hyperparameters at a bound are fine here
            warnings.simplefilter("ignore", ConvergenceWarning)
            self.gp.fit(z, residual - self.offset)

    def posterior(self, x: list, prior: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation of log-latency."""
        if self.gp is None:
            return prior + self.offset, np.full(len(prior), PRIOR_SIGMA)
        mu, sigma = self.gp.predict(self.project.transform(np.stack(x)), return_std=True)
        return prior + self.offset + mu, np.maximum(sigma, 1e-6)


MIX_MIN_MEASURED = 4  # measurements before the run's own ranking reweights the prior
MIX_EXPLORE_UNTIL = 16  # until this many measurements, half of each round is drawn at random


def kendall(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's tau-b of two score vectors (0 where either is constant)."""
    from scipy.stats import kendalltau

    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return 0.0
    tau = kendalltau(a, b).statistic
    return 0.0 if not np.isfinite(tau) else float(tau)


@SURROGATES.register("prior-mix")
class PriorMix(PriorGP):
    """A prior mixed from several models, reweighted online, plus PriorGP's GP residual.

    Each candidate's prior is a vector: the network's log-latency, and, where the predictor
    has tree companions, each one's negated throughput, and, with an `xgb` model, MetaSchedule's
    XGBModel's negated score (each ordered like latency; the companion's, when the companion is
    that XGBModel). Each part is standardised over every
    candidate scored in the run; the mixture is the parts' weighted sum, its weights each part's
    Kendall tau against the measured log-latencies (floored at 0, normalised), equal before
    `MIX_MIN_MEASURED` measurements. It is mapped onto log-latency by least squares on the
    measurements (the network's own scale before three of them), and the GP models the rest.

    The candidates a prior picks are those it ranks first, so among them even a prior that
    ranks the workload backwards can seem right: until `MIX_EXPLORE_UNTIL` measurements, half
    of each round is drawn at random from the pool (`explore_share`), which the weights can
    trust. A prior that is right still has the other half: its first picks are measured at once.
    """

    needs_model = True

    def __init__(self, predictor, seed: int, xgb=None, context=None):
        super().__init__(predictor, seed)
        trees = predictor.companion.names if predictor.companion is not None else []
        self.xgb = xgb if "xgb" not in trees else None  # the companion scores it, faster
        self.context = context
        self.names = ["network"] + trees + (["xgb"] if self.xgb is not None else [])
        self.seen_parts: list[np.ndarray] = []  # every candidate's parts, for the scales
        self.weights = np.full(len(self.names), 1.0 / len(self.names))
        self.scale = (0.0, 1.0)  # log-latency = a + b * mixture
        self.weight_log: list[dict] = []  # the weights after each refit, for the run's report

    def features(self, cands) -> tuple[list, np.ndarray]:
        log_seconds, throughput, emb = self.predictor.score_parts([c.sch for c in cands])
        parts = [log_seconds]
        if throughput is not None:  # a column per tree model where several blend
            parts += list(-np.asarray(throughput, float).reshape(len(log_seconds), -1).T)
        if self.xgb is not None:
            parts.append(-self._xgb_scores(cands))
        parts = np.stack(parts, axis=1).astype(np.float64)
        self.seen_parts += list(parts)
        return list(emb.astype(np.float64)), parts

    def _xgb_scores(self, cands) -> np.ndarray:
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo
        from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

        measure = [MeasureCandidate(c.sch, ArgInfo.from_entry_func(c.sch.mod,
                                                                   remove_preproc=True))
                   for c in cands]
        return np.asarray(self.xgb.predict(self.context, measure), float)

    def explore_share(self, measured: int) -> float:
        """The share of a round drawn at random, after `measured` measurements."""
        return 0.5 if measured < MIX_EXPLORE_UNTIL else 0.0

    def mixture(self, parts: np.ndarray) -> np.ndarray:
        """The weighted sum of the standardised parts (rows: candidates)."""
        seen = np.stack(self.seen_parts)
        std = seen.std(axis=0)
        z = (np.asarray(parts, float) - seen.mean(axis=0)) / np.where(std > 0, std, 1.0)
        return z @ self.weights

    def prior(self, parts: np.ndarray) -> np.ndarray:
        """The mixed prior log-latency of candidates."""
        a, b = self.scale
        return a + b * self.mixture(parts)

    def fit(self, x_all: list, x: list, prior: np.ndarray, y: np.ndarray) -> None:
        parts = np.asarray(prior, float).reshape(len(y), len(self.names))
        if len(y) >= MIX_MIN_MEASURED:
            taus = np.array([kendall(parts[:, j], y) for j in range(len(self.names))])
            good = np.maximum(taus, 0.0)
            self.weights = good / good.sum() if good.sum() > 0 else np.zeros(len(good))
            self.weight_log.append({"measured": len(y), **dict(zip(self.names,
                                                                    map(float, self.weights)))})
        if len(y) >= 3 and self.weights.any():
            m = self.mixture(parts)
            b = float(np.cov(m, y, bias=True)[0, 1] / max(m.var(), 1e-12))
            b = max(b, 0.0)
            self.scale = (float(y.mean() - b * m.mean()), b)
        elif len(y) >= 1 and not self.weights.any():
            self.scale = (float(y.mean()), 0.0)  # no model ranks this workload: no prior
        else:  # the network's own level and spread
            seen = np.stack(self.seen_parts)[:, 0]
            self.scale = (float(seen.mean()), float(seen.std()) or 1.0)
        super().fit(x_all, x, self.prior(parts), y)

    def posterior(self, x: list, prior: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mixed = self.prior(np.asarray(prior, float).reshape(len(x), len(self.names)))
        mu, sigma = super().posterior(x, mixed)
        if self.gp is None and not self.weights.any():  # nothing to lean on: explore widely
            sigma = np.maximum(sigma, float(np.std(mixed)) or PRIOR_SIGMA)
        return mu, sigma


LEARN_MIN_MEASURED = 8  # measurements before the prior's XGBModel learns from the run
LEARN_ROUNDS = 10  # boosting rounds it trains on them at each refit (from the pretrained booster)


class Scored(NamedTuple):
    """What `PriorLearn` keeps of a candidate: the network's embedding, the per-store feature
    rows the XGBModel scores and the blend's parts (the network's log-latency, then each tree
    companion's throughput)."""

    emb: np.ndarray
    stores: np.ndarray
    parts: np.ndarray


def scored_rows(logs, throughput, emb, stores) -> tuple[list[Scored], np.ndarray]:
    """`CostModelPredictor.score_parts(..., stores=True)`'s output as `PriorLearn`'s candidates,
    and their blend's parts (a row each: the network's log-latency, each companion's
    throughput)."""
    parts = np.column_stack([logs, np.asarray(throughput, float).reshape(len(logs), -1)])
    return [Scored(e, s, p) for e, s, p in zip(np.asarray(emb, np.float64), stores, parts)], parts


class RunLearning:
    """What the tasks of one tuning run share in `PriorLearn`: each task's measurements (its
    programs' per-store rows and log-latencies) and the prior's XGBModel trained on all of
    them, as MetaSchedule's one XGBModel learns from every task of a network it has measured
    (each program's throughput over its own task's fastest). Trained again only when the
    run's measurements have grown, from the pretrained booster each time."""

    def __init__(self, pretrained, rounds: int, seed: int):
        self.pretrained, self.rounds, self.seed = pretrained, rounds, seed
        self.measured: dict[str, tuple[list, np.ndarray]] = {}  # task: (store rows, log s)
        self.model, self.trained_on = pretrained, 0

    def learn(self, task: str, stores: list, y: np.ndarray):
        """The XGBModel once `task`'s measurements are `stores` and `y` (the pretrained one
        before the run has `LEARN_MIN_MEASURED`)."""
        self.measured[task] = (list(stores), np.asarray(y, float))
        tasks = [m for m in self.measured.values() if len(m[1])]
        total = sum(len(ys) for _, ys in tasks)
        if total >= LEARN_MIN_MEASURED and total != self.trained_on:
            self.model = self.pretrained.trained_on(
                [r for rows, _ in tasks for r in rows], np.concatenate([ys for _, ys in tasks]),
                self.rounds, seed=self.seed,
                groups=np.concatenate([np.full(len(ys), i) for i, (_, ys) in enumerate(tasks)]))
            self.trained_on = total
        return self.model


@SURROGATES.register("prior-learn")
class PriorLearn(PriorGP):
    """PriorGP whose prior keeps learning from the run: at each refit the blend's XGBModel (the
    checkpoint's companion, pretrained on its training records) trains `rounds` more
    boosting rounds on this run's measurements, as MetaSchedule's XGBModel learns in tuning
    (pack-sum loss on throughput over the task's fastest), and the blend is recomputed with
    it; the GP models the rest. Where the pretrained models rank this workload poorly the tree
    part of the prior corrects itself from the measurements, at a fraction of
    ms-xgb-pretrained's cost (which retrains on every pretraining record each round). The
    tasks of one run (a network's) share one `RunLearning` (`run`, a dict its searches share),
    so each task's prior learns from every task measured so far.

    The blend's parts are standardised over every candidate scored in the run (the measured
    and the pool alike), so a candidate's prior does not hang on which others it is scored with.
    """

    needs_model = True

    def __init__(self, predictor, seed: int, rounds: int = LEARN_ROUNDS,
                 run: dict | None = None, task: str = ""):
        super().__init__(predictor, seed)
        self.check(predictor)
        self.rounds = rounds
        companion = predictor.companion
        self.column = companion.names.index("xgb")
        self.pretrained = self.xgb = companion.models[self.column]
        self.learning = (run if run is not None else {}).setdefault(
            "learning", RunLearning(self.pretrained, rounds, seed))
        self.task = task
        self.shares = np.asarray([1 - companion.weight] if len(companion.models) == 1
                                 else companion.shares)
        self.scale: tuple[np.ndarray, np.ndarray] | None = None  # the parts' mean and std

    @staticmethod
    def learns(predictor) -> bool:
        """Whether `predictor`'s blend has an XGBModel to keep training."""
        return predictor.companion is not None and "xgb" in predictor.companion.names

    @classmethod
    def check(cls, predictor) -> None:
        companion = predictor.companion
        if not cls.learns(predictor):
            raise UserError("the prior-learn surrogate needs a checkpoint blended with "
                            "MetaSchedule's XGBModel (this one's companion: "
                            f"{companion.name if companion else 'none'}); pass one that "
                            "`costmodel blend` blended with xgb, such as the shipped default")

    def features(self, cands) -> tuple[list, np.ndarray]:
        return scored_rows(*self.predictor.score_parts([c.sch for c in cands], stores=True))

    def parts(self, x: list) -> np.ndarray:
        """The blend's parts of candidates `x`, the XGBModel's column from its current booster."""
        parts = np.stack([c.parts for c in x]).astype(np.float64)
        if self.xgb is not self.pretrained:
            parts[:, 1 + self.column] = self.xgb.throughput([c.stores for c in x])
        return parts

    def prior(self, parts: np.ndarray) -> np.ndarray:
        """The blended log-latency (`costmodel.blend.blend`'s, over the run's scale)."""
        mean, std = self.scale
        z = (parts - mean) / std
        return mean[0] + std[0] * (self.predictor.companion.weight * z[:, 0]
                                   - z[:, 1:] @ self.shares)

    def fit(self, x_all: list, x: list, prior: np.ndarray, y: np.ndarray) -> None:
        self.xgb = self.learning.learn(self.task, [c.stores for c in x], y)
        seen = self.parts(x_all)
        std = seen.std(axis=0, ddof=1) if len(seen) > 1 else np.ones(seen.shape[1])
        self.scale = (seen.mean(axis=0), np.where(std > 0, std, 1.0))
        super().fit([c.emb for c in x_all], [c.emb for c in x],
                    self.prior(self.parts(x)) if len(x) else np.zeros(0), y)

    def posterior(self, x: list, prior: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return super().posterior([c.emb for c in x], self.prior(self.parts(x)))


@SURROGATES.register("forest")
class ForestSurrogate(Surrogate):
    """ytopt-style: a random forest over sampled decisions, uncertainty from its trees."""

    def __init__(self, predictor, seed: int):
        super().__init__(predictor, seed)
        self.forest = None

    @staticmethod
    def decisions(trace_json: str) -> list[float]:
        """A schedule's sampled decisions as numbers (tile factors on a log2 scale)."""
        out = []
        for _, decision in json.loads(trace_json)[1]:
            values = decision if isinstance(decision, list) else [decision]
            out += [math.log2(v) if isinstance(v, int) and v > 0 else float(v or 0)
                    for v in values if isinstance(v, (int, float))]
        return out

    def features(self, cands) -> tuple[np.ndarray, np.ndarray]:
        rows = [self.decisions(c.trace_json) for c in cands]
        return [[len(r), *r] for r in rows], np.zeros(len(cands))

    @staticmethod
    def _pad(x: list, width: int) -> np.ndarray:
        return np.array([list(r) + [0.0] * (width - len(r)) for r in x], dtype=np.float64)

    def fit(self, x_all: list, x: list, prior: np.ndarray, y: np.ndarray) -> None:
        from sklearn.ensemble import RandomForestRegressor

        self.forest = None
        if len(y) < 2:
            return
        self.width = max(len(r) for r in x_all)
        self.forest = RandomForestRegressor(100, min_samples_leaf=1, random_state=self.seed)
        self.forest.fit(self._pad(x, self.width), y)

    def posterior(self, x: list, prior: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.forest is None:  # no model yet: random order, as ytopt's initial samples
            rng = np.random.default_rng(self.seed + len(x))
            return rng.random(len(x)), np.ones(len(x))
        per_tree = np.stack([t.predict(self._pad(x, self.width))
                             for t in self.forest.estimators_])
        return per_tree.mean(0), np.maximum(per_tree.std(0), 1e-6)


def acquisition_scores(kind: str, mu: np.ndarray, sigma: np.ndarray, best: float | None,
                       kappa: float) -> np.ndarray:
    """Higher is better. `mu`, `sigma`, `best` are log-latencies (lower is faster)."""
    if kind == "lcb" or best is None:
        return -(mu - kappa * sigma)
    z = (best - mu) / sigma
    return sigma * (z * norm.cdf(z) + norm.pdf(z))


@derived_object
class BayesOptSearch(PySearchStrategy):
    """Bayesian optimisation with the learned cost model as prior, as a MetaSchedule strategy.

    Args:
        predictor: a `CostModelPredictor` (needed by the "prior-gp" surrogate).
        surrogate: "prior-gp" (learned prior + GP residual) or "forest" (ytopt-style, no prior).
        acquisition: "ei" (expected improvement) or "lcb" (lower confidence bound).
        pool_size: new candidates drawn each round.
        evolve_fraction: share of the new candidates that mutate the best schedules so far.
        num_parents: how many of the best schedules are mutated.
        parent_share: at least this share of the measured schedules, the fastest, are mutated
            (MetaSchedule's evolution starts each round from its best fifth measured): more
            parents, a wider neighbourhood, as the run's measurements grow.
        space_parents: also mutate the fastest this many measured schedules of each design
            space (mutations keep a schedule in its space, so once the best few share one, the
            others' neighbourhoods are no longer searched).
        max_depth: once one mutation of the parents gives fewer than the round's share of
            unseen schedules (their neighbourhood is used up), the rest are two mutations
            from them, then three, up to this many.
        generations: after the round's draw, how many generations evolve from the
            `num_parents` unmeasured candidates of the pool whose posterior mean is fastest
            (the surrogate refitted on this run's measurements, so a prior the measurements
            contradict steers them less), each of `children` new candidates.
        children: candidates per generation (default: a quarter of `pool_size`).
        kappa: exploration weight of "lcb".
        seed: seeds sampling and the surrogate; the same seed gives the same run.
        xgb: for "prior-mix", MetaSchedule's XGBModel pretrained on the checkpoint's training
            records, one more part of the prior.
    """

    def __init__(self, predictor=None, surrogate: str = "prior-gp", acquisition: str = "ei",
                 pool_size: int = 256, evolve_fraction: float = 0.5, num_parents: int = 8,
                 parent_share: float = 0.0, space_parents: int = 0, max_depth: int = 1,
                 generations: int = 0, children: int | None = None, kappa: float = 1.96,
                 seed: int = 0, xgb=None):
        super().__init__()
        self.xgb = xgb
        surrogate_class = SURROGATES.get(surrogate)
        if acquisition not in ACQUISITIONS:
            raise UserError(f"unknown acquisition {acquisition!r}; "
                            f"choose {', '.join(ACQUISITIONS)}")
        if surrogate_class.needs_model and predictor is None:
            raise UserError(f"the {surrogate} surrogate needs a cost-model checkpoint")
        if predictor is not None:
            surrogate_class.check(predictor)
        self.predictor = predictor
        if generations < 0 or (children is not None and children < 1) or max_depth < 1:
            raise UserError(f"generations must be at least 0, children and max_depth at least "
                            f"1, not {generations}, {children} and {max_depth}")
        if space_parents < 0:
            raise UserError(f"space_parents must be at least 0, not {space_parents}")
        if not 0 <= parent_share <= 1:
            raise UserError(f"parent_share is a share of the measured schedules, from 0 to 1, "
                            f"not {parent_share}")
        self.config = dict(surrogate=surrogate, acquisition=acquisition, pool_size=pool_size,
                           evolve_fraction=evolve_fraction, num_parents=num_parents,
                           parent_share=parent_share, space_parents=space_parents,
                           max_depth=max_depth, generations=generations,
                           children=children if children is not None else max(1, pool_size // 4),
                           kappa=kappa, seed=seed)
        self.context = None
        self.sampler = None
        self.history: list[tuple[str, float]] = []  # (trace hash, seconds) in measured order
        self.fitted_on: int | None = None  # measurements the surrogate was last fitted on
        self.run: dict = {}  # what the tasks of one tuning run share (its clones: `PriorLearn`)

    def __repr__(self) -> str:
        return f"BayesOptSearch({self.config['surrogate']}, {self.config['acquisition']})"

    def _initialize_with_tune_context(self, context) -> None:
        self.context = context
        if self.predictor is not None and \
                self.predictor.target_kind != context.target.kind.name:
            raise UserError(f"the checkpoint was trained for {self.predictor.target_kind} "
                            f"targets, not {context.target.kind.name}; pass a checkpoint "
                            "trained for this target")
        # as many threads as MetaSchedule's own search uses (the tune context's)
        self.sampler = ScheduleSampler(context.mod, context.target, context,
                                       threads=context.num_threads)

    def pre_tuning(self, max_trials: int, num_trials_per_iter: int, design_spaces,
                   database=None, cost_model=None) -> None:
        cls, seed = SURROGATES.get(self.config["surrogate"]), self.config["seed"]
        self.max_trials, self.per_iter = max_trials, num_trials_per_iter
        if cls is PriorMix:
            self.surrogate = cls(self.predictor, seed, xgb=self.xgb, context=self.context)
        elif cls is PriorLearn:
            self.surrogate = cls(self.predictor, seed, run=self.run,
                                 task=str(self.context.task_name))
        else:
            self.surrogate = cls(self.predictor, seed)
        self.seen: set[str] = set()
        self.pool: list = []  # unmeasured candidates
        self.pool_x: list = []
        self.pool_prior: list = []
        self.measured: list = []  # (candidate, x, prior, log seconds) of successful runs
        self.trials = 0
        self.round = 0
        self.pending: list = []
        self.fitted_on = None

    def post_tuning(self) -> None:
        self.pool, self.pool_x, self.pool_prior, self.pending = [], [], [], []

    def _grow_pool(self) -> None:
        cfg = self.config
        seed = derive_seed(cfg["seed"], str(self.context.task_name), self.round)
        n_evolve = int(cfg["pool_size"] * cfg["evolve_fraction"]) if self.measured else 0
        new = self.sampler.random(cfg["pool_size"] - n_evolve, seed, self.seen)
        if n_evolve:
            best = self._parents()
            parents, spaces = [c.trace_json for c in best], [c.space for c in best]
            evolved = self.sampler.evolve(parents, n_evolve, seed + 1, self.seen, spaces=spaces)
            for depth in range(2, cfg["max_depth"] + 1):  # the parents' neighbours all seen:
                if len(evolved) >= n_evolve:  # reach past them, as a population's generations do
                    break
                evolved += self.sampler.evolve(parents, n_evolve - len(evolved),
                                               derive_seed(seed, "depth", depth), self.seen,
                                               depth=depth, spaces=spaces)
            new += evolved
        self._add(new)
        for generation in range(cfg["generations"]):
            if not self.pool:
                break
            mu, _ = self._posterior()
            best = [self.pool[i] for i in np.argsort(mu, kind="stable")[:cfg["num_parents"]]]
            if not self._add(self.sampler.evolve([c.trace_json for c in best], cfg["children"],
                                                 seed + 2 + generation, self.seen,
                                                 spaces=[c.space for c in best])):
                break  # no unseen mutation left

    def _parents(self) -> list:
        """The measured candidates whose mutations the round draws: the fastest `num_parents`
        (or `parent_share` of them, if more), and the fastest `space_parents` of each space."""
        cfg = self.config
        ranked = [m[0] for m in sorted(self.measured, key=lambda m: m[3])]
        best = ranked[:max(cfg["num_parents"], math.ceil(cfg["parent_share"] * len(ranked)))]
        if cfg["space_parents"]:
            chosen, per_space = {c.trace_hash for c in best}, {}
            for c in ranked:
                per_space[c.space] = per_space.get(c.space, 0) + 1
                if per_space[c.space] <= cfg["space_parents"] and c.trace_hash not in chosen:
                    best.append(c)
        return best

    def _add(self, cands: list) -> int:
        """Score `cands` with the surrogate and add them to the pool; how many were added."""
        if cands:
            x, prior = self.surrogate.features(cands)
            self.pool += cands
            self.pool_x += list(x)
            self.pool_prior += list(prior)
        return len(cands)

    def _posterior(self) -> tuple[np.ndarray, np.ndarray]:
        """The surrogate's posterior over the pool, refitted once per new measurement count
        (a round's generations share the fit that its selection then uses)."""
        ms = self.measured
        if self.fitted_on != len(ms):
            self.surrogate.fit(self.pool_x + [m[1] for m in ms], [m[1] for m in ms],
                               np.array([m[2] for m in ms]), np.array([m[3] for m in ms]))
            self.fitted_on = len(ms)
        return self.surrogate.posterior(self.pool_x, np.array(self.pool_prior))

    def _select(self, k: int) -> list[int]:
        """Indices of the `k` pool candidates the acquisition function ranks highest."""
        ms = self.measured
        mu, sigma = self._posterior()
        best = min((m[3] for m in ms), default=None)
        scores = acquisition_scores(self.config["acquisition"], mu, sigma, best,
                                    self.config["kappa"])
        order = list(np.argsort(-scores, kind="stable"))
        n_random = int(k * getattr(self.surrogate, "explore_share", lambda n: 0.0)(len(ms)))
        picks = order[:k - n_random]
        if n_random:  # a share drawn at random from the rest: an unbiased look at the prior
            rng = np.random.default_rng(derive_seed(self.config["seed"], "explore", self.round))
            rest = order[k - n_random:]
            picks += [rest[i] for i in sorted(rng.permutation(len(rest))[:n_random])]
        return picks

    def generate_measure_candidates(self):
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo

        if self.trials >= self.max_trials:
            return None
        self._grow_pool()
        self.round += 1
        if not self.pool:
            return None  # the design space has no unseen schedule left
        picks = self._select(min(self.per_iter, self.max_trials - self.trials))
        self.pending = [(self.pool[i], self.pool_x[i], self.pool_prior[i]) for i in picks]
        for i in sorted(picks, reverse=True):
            del self.pool[i], self.pool_x[i], self.pool_prior[i]
        return [MeasureCandidate(c.sch, ArgInfo.from_entry_func(c.sch.mod, remove_preproc=True))
                for c, _, _ in self.pending]

    def notify_runner_results(self, measure_candidates, results) -> None:
        for (cand, x, prior), res in zip(self.pending, results):
            latency = run_latency(res.run_secs, res.error_msg)
            self.history.append((cand.trace_hash, math.inf if latency is None else latency))
            if latency is not None:
                self.measured.append((cand, x, prior, math.log(latency)))
        self.trials += len(results)
        self.pending = []

    def clone(self) -> "BayesOptSearch":
        """The same search for another task of the run (MetaSchedule clones the strategy for
        each task it extracts), sharing `run` with this one."""
        twin = BayesOptSearch(self.predictor, xgb=self.xgb, **self.config)
        twin.run = self.run
        return twin
