"""Our models as MetaSchedule cost models: `tune_tir(..., cost_model=LearnedCostModel(...))`.

`LearnedCostModel` is a thin adapter over `costmodel.predictor.CostModelPredictor`: `predict`
featurises the candidates and returns throughput scores (higher is better, positive,
comparable across calls); `update` keeps the measured programs of the run and fine-tunes the
network on them, so the model adapts to the workload being tuned. `MixtureCostModel` gives
EvolutionarySearch what bo-mix ranks with: the network, its tree companion and the pretrained
XGBModel mixed by how well each ranks the run's measurements, plus the GP on the residual.
"""

from __future__ import annotations

import copy

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model import PyCostModel

from costmodel.predictor import CostModelPredictor
from datagen.errors import UserError
from datagen.measure import run_latency

ADAPT_STEPS = 20
ADAPT_LR = 1e-4
REFERENCE_SECS = 1e-6  # scores are throughput relative to a 1 us program


def check_target(predictor: CostModelPredictor, context) -> None:
    """Raises: UserError: the tuned target is of another kind than the checkpoint's (its
    featuriser would lower the candidates for the checkpoint's target)."""
    kind = context.target.kind.name
    if predictor.target_kind != kind:
        raise UserError(f"the checkpoint was trained for {predictor.target_kind} targets, not "
                        f"{kind}; pass a checkpoint trained for this target")


@derived_object
class LearnedCostModel(PyCostModel):
    """The GraphSAGE cost model inside MetaSchedule's search.

    Args:
        checkpoint: a checkpoint written by `train fit` (a list: a seed ensemble), or a loaded
            `CostModelPredictor` (copied, so adapting never changes the caller's).
        adapt_steps: fine-tuning steps per `update` (0: never adapt).
        adapt_lr: fine-tuning learning rate.
        device: the torch device a checkpoint's networks run and adapt on ("cpu" if None,
            "cuda"); a loaded predictor stays on its own.
    """

    def __init__(self, checkpoint, adapt_steps: int = ADAPT_STEPS,
                 adapt_lr: float = ADAPT_LR, device: str | None = None):
        super().__init__()
        self.predictor = copy.deepcopy(checkpoint) \
            if isinstance(checkpoint, CostModelPredictor) \
            else CostModelPredictor.load(checkpoint, device=device)
        self.adapt_steps, self.adapt_lr = adapt_steps, adapt_lr
        self.measured: list[tuple] = []  # (graph, seconds, workload id)
        self.workloads: dict[str, int] = {}

    def load(self, path: str) -> None:
        """Replace the model with the checkpoint at `path`, on the device of the current one."""
        self.predictor = CostModelPredictor.load(path, device=str(self.predictor.device))

    def save(self, path: str) -> None:
        self.predictor.save(path)

    def update(self, context, candidates, results) -> None:
        check_target(self.predictor, context)
        group = self.workloads.setdefault(context.task_name, len(self.workloads))
        for cand, res in zip(candidates, results):
            latency = run_latency(res.run_secs, res.error_msg)
            if latency is not None:
                graph = self.predictor.featurizer.featurize(cand.sch)
                self.measured.append((graph, latency, group))
        if self.adapt_steps and self.measured:
            self.predictor.adapt(*zip(*self.measured), steps=self.adapt_steps,
                                 lr=self.adapt_lr)

    def predict(self, context, candidates) -> np.ndarray:
        check_target(self.predictor, context)
        seconds = self.predictor.predict([cand.sch for cand in candidates])
        return (REFERENCE_SECS / seconds).astype("float64")


@derived_object
class MixtureCostModel(PyCostModel):
    """bo-mix's surrogate (`tuning.search.PriorMix`) as EvolutionarySearch's cost model: each
    `update` refits the mixture's weights and the GP on every measurement of the run, and
    `predict` scores candidates by the posterior mean, as throughput relative to 1 us.

    Args:
        predictor: a `CostModelPredictor` (with its tree companion, if any).
        xgb: MetaSchedule's XGBModel pretrained on the checkpoint's training records, or None.
        seed: seeds the GP.
    """

    def __init__(self, predictor: CostModelPredictor, xgb=None, seed: int = 0):
        super().__init__()
        self.predictor, self.xgb, self.seed = predictor, xgb, seed
        self.surrogate = None
        self.measured: list[tuple] = []  # (embedding, prior parts, log seconds)

    def load(self, path: str) -> None:
        raise UserError("a mixture cost model is made from a checkpoint, not loaded from a file")

    def save(self, path: str) -> None:
        raise UserError("a mixture cost model lives only as long as its tuning run")

    def _surrogate(self, context):
        from tuning.search import PriorMix

        check_target(self.predictor, context)
        if self.surrogate is None:
            self.surrogate = PriorMix(self.predictor, self.seed, xgb=self.xgb, context=context)
        return self.surrogate

    def update(self, context, candidates, results) -> None:
        surrogate = self._surrogate(context)
        ran = [(c, run_latency(r.run_secs, r.error_msg)) for c, r in zip(candidates, results)]
        ran = [(c, s) for c, s in ran if s is not None]
        if not ran:
            return
        x, parts = surrogate.features([c for c, _ in ran])
        self.measured += [(e, p, float(np.log(s))) for e, p, (_, s) in zip(x, parts, ran)]
        xs, ps, ys = zip(*self.measured)
        surrogate.fit(list(xs), list(xs), np.stack(ps), np.array(ys))

    def predict(self, context, candidates) -> np.ndarray:
        surrogate = self._surrogate(context)
        if not len(candidates):
            return np.zeros(0)
        x, parts = surrogate.features(candidates)
        mu, _ = surrogate.posterior(x, parts)
        return (REFERENCE_SECS / np.exp(mu)).astype("float64")
