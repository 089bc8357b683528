"""Per-token early-exit criteria for looped groups (docs/methods.md#early-exit: the paper's rule and Huginn's,
arXiv 2502.05171).

A group is applied k = 1, 2, ... times; x^(0) is its input and x^(k) the state after k applications, one row
per token. After every application the caller hands the new states of the tokens *still running* to an
`ExitRule`, which answers which of them exit now. Exiting at step k means the token's final state is x^(k).
The rule is built from three parts:

- a `Criterion`: a per-token value after each step (it keeps whatever history it needs: x^(k−1), Δ^(k−1), the
  previous next-token distribution, ...). A step is a *hit* when value < threshold. An undefined value is
  NaN and never a hit (the acceleration at k = 1, say).
- a `HitCounter`: a token exits after `hits` consecutive hits (a non-hit resets its count), not before
  `min_loops`, and always at `max_loops`.
- the bookkeeping of which tokens still run: after a step the rule drops the tokens that exited, so the next
  call gets the states of the remaining ones, in the same order (`ExitRule.running` holds their original
  indices).

Conventions follow `geometry`: Δ^(k) = x^(k) − x^(k−1), a^(k) = ‖Δ^(k) − Δ^(k−1)‖, norms are L2 over the
channel dimension. Ratios here use one rule for a zero denominator: 0/0 is 0 (the state stopped moving:
converged) and z/0 with z > 0 is +inf (never a hit). Half-precision inputs are upcast to float32.

Criteria that read a next-token distribution (`kl`, `entropy_difference`, `argmax`) have
`needs_logits = True`: the caller decodes the current states to logits and passes them in. Which decode is a
property of the criterion (`decode`), carried for the caller and for the record; the criterion itself only
consumes logits:

- "rest": the rest of the network after the group (any later layers and groups, then ln_f and lm_head), as
  Huginn's coda does: the KL exit of Geiping et al.
- "head": only the final norm and LM head on the group's current state (`head_decode`): the cheap variant.

Cached decoding (`engine.step_tokens`, which both the sweep's teacher-forced quality and generation run) drives
a rule step by step as the group runs; nothing here replays a stored trajectory.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from twoscale.models.looped_gpt import at_least_float32

Tensor = torch.Tensor

DECODES = ("rest", "head")


def _norm(x: Tensor) -> Tensor:
    return torch.linalg.vector_norm(x, dim=-1)


def _ratio(num: Tensor, den: Tensor) -> Tensor:
    """num / den for num >= 0, with 0/0 = 0 and z/0 = +inf; NaN in num stays NaN."""
    safe = torch.where(den > 0, den, torch.ones_like(den))
    inf_or_zero = torch.where(num == 0, torch.zeros_like(num), torch.full_like(num, math.inf))
    return torch.where(den > 0, num / safe, torch.where(num.isnan(), num, inf_or_zero))


def latent_difference(x: Tensor, prev: Tensor) -> Tensor:
    """‖x − prev‖ / ‖x‖ per row: how far a state moved, relative to its size."""
    return _ratio(_norm(x - prev), _norm(x))


def relative_acceleration(x: Tensor, prev: Tensor, before: Tensor) -> Tensor:
    """‖(x − prev) − (prev − before)‖ / ‖x‖ per row: the second difference of three states, relative to the last
    one's size (the acceleration rule's by_state variant)."""
    return _ratio(_norm((x - prev) - (prev - before)), _norm(x))


def _nan(x: Tensor) -> Tensor:
    return torch.full(x.shape[:1], math.nan, dtype=at_least_float32(x).dtype, device=x.device)


# --- criteria ----------------------------------------------------------------------------------------------


class Criterion:
    """A per-token value after each loop step; the rule compares it with a threshold (hit: value < threshold).

    Subclasses implement `score`, keep their history in `self.memory` (tensors with one row per running token,
    so `select` can drop exited tokens), and set the class attributes:
      name, needs_logits, first_k (the first step at which a hit is possible),
      default_threshold (None: the caller must give one), default_hits.
    """

    name: str = ""
    needs_logits: bool = False
    first_k: int = 1
    default_threshold: float | None = None
    default_hits: int = 1

    def __init__(self) -> None:
        self.memory: dict[str, Tensor] = {}

    def reset(self, x0: Tensor) -> None:
        """Start a group: x0 is its input x^(0), (N, C)."""
        self.memory = {"x": at_least_float32(x0)}

    def score(self, x: Tensor, logits: Tensor | None = None) -> Tensor:
        """Value (N,) for the new state x = x^(k) (N, C) and, if needed, its logits (N, V); updates memory."""
        raise NotImplementedError

    def select(self, keep: Tensor) -> None:
        """Keep only the tokens where `keep` (N,) is True."""
        self.memory = {key: value[keep] for key, value in self.memory.items()}

    def describe(self) -> dict[str, Any]:
        return {"criterion": self.name}


class FixedDepth(Criterion):
    """No early exit: value +inf at every step, so a token runs to `max_loops` (the `fixed` baseline)."""

    name = "fixed"
    default_threshold = 0.0

    def score(self, x: Tensor, logits: Tensor | None = None) -> Tensor:
        return torch.full(x.shape[:1], math.inf, dtype=at_least_float32(x).dtype, device=x.device)


ACCELERATION_VARIANTS = ("vector", "by_step", "by_state", "size_difference")


class Acceleration(Criterion):
    """The paper's second-difference rule (default two hits). Defined from k = 2 (NaN, no hit, at k = 1):

      vector:          a^(k) = ‖Δ^(k) − Δ^(k−1)‖ = ‖x^(k) − 2x^(k−1) + x^(k−2)‖
      by_step:         a^(k) / ‖Δ^(k−1)‖
      by_state:        a^(k) / ‖x^(k)‖
      size_difference: |‖Δ^(k)‖ − ‖Δ^(k−1)‖|   (the scalar reading of "second difference in step size")

    With two hits the earliest exit is k = 3.
    """

    name = "acceleration"
    first_k = 2
    default_hits = 2

    def __init__(self, variant: str = "vector") -> None:
        super().__init__()
        if variant not in ACCELERATION_VARIANTS:
            known = ", ".join(ACCELERATION_VARIANTS)
            raise ValueError(f"unknown acceleration variant {variant!r}; known: {known}")
        self.variant = variant

    def score(self, x: Tensor, logits: Tensor | None = None) -> Tensor:
        x = at_least_float32(x)
        step = x - self.memory["x"]
        prev_step = self.memory.get("step")
        self.memory.update(x=x, step=step)
        if prev_step is None:
            return _nan(x)
        if self.variant == "size_difference":
            return (_norm(step) - _norm(prev_step)).abs()
        a = _norm(step - prev_step)
        if self.variant == "by_step":
            return _ratio(a, _norm(prev_step))
        if self.variant == "by_state":
            return _ratio(a, _norm(x))
        return a

    def describe(self) -> dict[str, Any]:
        return {"criterion": self.name, "variant": self.variant}


class StepNorm(Criterion):
    """First-order rule: ‖Δ^(k)‖ (absolute) or ‖Δ^(k)‖ / ‖x^(k−1)‖ (relative). Can hit from k = 1."""

    name = "step_norm"

    def __init__(self, relative: bool = False) -> None:
        super().__init__()
        self.relative = relative

    def score(self, x: Tensor, logits: Tensor | None = None) -> Tensor:
        x, prev = at_least_float32(x), self.memory["x"]
        self.memory["x"] = x
        size = _norm(x - prev)
        return _ratio(size, _norm(prev)) if self.relative else size

    def describe(self) -> dict[str, Any]:
        return {"criterion": self.name, "relative": self.relative}


class LatentDifference(Criterion):
    """Huginn's latent difference ‖x^(k) − x^(k−1)‖ / ‖x^(k)‖ (default threshold 0.03). Can hit from k = 1."""

    name = "latent_difference"
    default_threshold = 0.03

    def score(self, x: Tensor, logits: Tensor | None = None) -> Tensor:
        x, prev = at_least_float32(x), self.memory["x"]
        self.memory["x"] = x
        return latent_difference(x, prev)


class Cosine(Criterion):
    """Huginn's 1 − cos(x^(k), x^(k−1)) (default threshold 1e-3). Can hit from k = 1.

    With a zero state the cosine counts as 0 (value 1), unless both states are equal (value 0)."""

    name = "cosine"
    default_threshold = 1e-3

    def score(self, x: Tensor, logits: Tensor | None = None) -> Tensor:
        x, prev = at_least_float32(x), self.memory["x"]
        self.memory["x"] = x
        den = _norm(x) * _norm(prev)
        cos = torch.where(den > 0, (x * prev).sum(-1) / torch.where(den > 0, den, 1.0), 0.0).clamp(-1.0, 1.0)
        same = (x == prev).all(-1)
        return torch.where(same, torch.zeros_like(cos), 1.0 - cos)


class _LogitCriterion(Criterion):
    """Base of the criteria on the decoded next-token distribution p_k = softmax(logits of x^(k)).

    p_0 (before the first step) is uniform over the V entries of the logits. `decode` records how the caller
    turns states into logits: "rest" (the rest of the network) or "head" (ln_f + lm_head on the state)."""

    needs_logits = True

    def __init__(self, decode: str = "rest") -> None:
        super().__init__()
        if decode not in DECODES:
            raise ValueError(f"unknown decode {decode!r}; known: {', '.join(DECODES)}")
        self.decode = decode

    def reset(self, x0: Tensor) -> None:
        self.memory = {}  # p_0 is uniform; V is only known when the first logits arrive

    def _log_probs(self, logits: Tensor | None) -> Tensor:
        if logits is None:
            raise ValueError(f"{self.name} needs the logits of the current states")
        return F.log_softmax(at_least_float32(logits), dim=-1)

    def describe(self) -> dict[str, Any]:
        return {"criterion": self.name, "decode": self.decode}


def _plogp(logp: Tensor) -> Tensor:
    """p log p elementwise, 0 where p = 0."""
    p = logp.exp()
    return torch.where(p > 0, p * logp, torch.zeros_like(p))


class KL(_LogitCriterion):
    """Geiping et al.: KL(p_{k−1} ‖ p_k) = Σ_v p_{k−1}(v) (log p_{k−1}(v) − log p_k(v)), p_0 uniform.

    Paper threshold 5e-4, one hit. Can hit from k = 1 (against the uniform p_0)."""

    name = "kl"
    default_threshold = 5e-4

    def score(self, x: Tensor, logits: Tensor | None = None) -> Tensor:
        logp = self._log_probs(logits)
        prev = self.memory.get("logp")
        if prev is None:
            prev = torch.full_like(logp, -math.log(logp.shape[-1]))
        self.memory["logp"] = logp
        p_prev = prev.exp()
        kl = torch.where(p_prev > 0, p_prev * (prev - logp), torch.zeros_like(p_prev)).sum(-1)
        # KL >= 0; float32 rounding makes the sum slightly negative once the distribution stops moving, which
        # would count as a hit at threshold 0 (the never-exit end of a sweep)
        return kl.clamp_min(0.0)


class EntropyDifference(_LogitCriterion):
    """Huginn: |H(p_k) − H(p_{k−1})|, H(p) = −Σ p log p, H(p_0) = log V (uniform). Threshold 1e-3 in Huginn.

    Can hit from k = 1. (Huginn's own code starts from H = 100 instead, so its first step never hits.)"""

    name = "entropy_difference"
    default_threshold = 1e-3

    def score(self, x: Tensor, logits: Tensor | None = None) -> Tensor:
        logp = self._log_probs(logits)
        h = -_plogp(logp).sum(-1)
        prev = self.memory.get("h")
        if prev is None:
            prev = torch.full_like(h, math.log(logp.shape[-1]))
        self.memory["h"] = h
        return (h - prev).abs()


class ArgmaxStability(_LogitCriterion):
    """Huginn: the most likely next token is unchanged from the previous step (default 5 hits in a row).

    Value 0 when argmax p_k == argmax p_{k−1}, 1 when it changed, NaN at k = 1 (no previous token); the fixed
    threshold 0.5 makes "unchanged" the hit. With 5 hits the earliest exit is k = 6, as in Huginn."""

    name = "argmax"
    default_threshold = 0.5
    first_k = 2
    default_hits = 5

    def score(self, x: Tensor, logits: Tensor | None = None) -> Tensor:
        if logits is None:
            raise ValueError(f"{self.name} needs the logits of the current states")
        token = logits.argmax(-1)
        prev = self.memory.get("token")
        self.memory["token"] = token
        dtype = at_least_float32(logits).dtype
        if prev is None:
            return torch.full(token.shape, math.nan, dtype=dtype, device=token.device)
        return (token != prev).to(dtype)


# --- hit counting and the rule ------------------------------------------------------------------------------


PerRow = int | float | Tensor  # one value for every row, or a value per row (N,)


def _rows(value: PerRow | None, n: int, device: torch.device | str, dtype: torch.dtype) -> PerRow | None:
    """A per-row value moved to the rows' device and dtype, checked to have one entry per row; a value for every
    row (or None) as it is, so that an ordinary rule costs no tensor arithmetic for it."""
    if not isinstance(value, Tensor):
        return value
    if value.shape != (n,):
        raise ValueError(f"a per-row setting has {value.numel()} entries for {n} rows")
    return value.to(device=device, dtype=dtype)


def _kept(value: PerRow | None, keep: Tensor) -> PerRow | None:
    return value[keep] if isinstance(value, Tensor) else value


class HitCounter:
    """Consecutive hits per token. After step k a token exits when it has `hits` hits in a row and
    k >= min_loops, or when k == max_loops (None: no limit). `hits` and `max_loops` are one value for every
    token or a value per token (N,): the settings of a sweep then run as rows of one batch."""

    def __init__(self, hits: PerRow = 1, min_loops: int = 1, max_loops: PerRow | None = None) -> None:
        fewest_hits = int(hits.min()) if isinstance(hits, Tensor) else hits
        fewest_loops = int(max_loops.min()) if isinstance(max_loops, Tensor) else max_loops
        if fewest_hits < 1 or min_loops < 1 or (fewest_loops is not None and fewest_loops < min_loops):
            raise ValueError(
                f"need hits >= 1 and 1 <= min_loops <= max_loops, got {hits}, {min_loops}, {max_loops}")
        self.hits, self.min_loops, self.max_loops = hits, min_loops, max_loops
        self.most_loops = int(max_loops.max()) if isinstance(max_loops, Tensor) else max_loops  # None: no limit
        self.k = 0
        self.count = torch.zeros(0, dtype=torch.long)
        self._needed, self._limit = hits, max_loops

    def reset(self, n: int, device: torch.device | str = "cpu") -> None:
        self.k = 0
        self.count = torch.zeros(n, dtype=torch.long, device=device)
        self._needed = _rows(self.hits, n, device, torch.long)
        self._limit = _rows(self.max_loops, n, device, torch.long)

    def update(self, hit: Tensor) -> Tensor:
        """Count this step's hits (N,) bool; return which tokens exit now (N,) bool."""
        if self.most_loops is not None and self.k >= self.most_loops:
            raise RuntimeError(f"step {self.k + 1} is past max_loops = {self.most_loops}")
        self.k += 1
        self.count = torch.where(hit, self.count + 1, torch.zeros_like(self.count))
        exit_now = (self.count >= self._needed) & (self.k >= self.min_loops)
        if isinstance(self._limit, Tensor):
            return exit_now | (self._limit <= self.k)
        return torch.ones_like(exit_now) if self._limit is not None and self.k >= self._limit else exit_now

    def select(self, keep: Tensor) -> None:
        self.count, self._needed, self._limit = self.count[keep], _kept(self._needed, keep), _kept(self._limit, keep)


class ExitRule:
    """A criterion, a threshold and a hit rule, run online over the tokens of one group.

        rule.start(x0)                        # x0 = x^(0), (N, C)
        for k in 1..max_loops:
            x = apply_group(x[still running])
            exit_now = rule.step(x, logits)   # (n,) over the tokens still running, in the order given
            ...                               # tokens with exit_now keep x^(k); the rest go on

    After `step`, the exited tokens are dropped: the next call takes the remaining tokens' states (in the same
    order); `running` holds their indices into the original N. threshold None takes the criterion's default.
    threshold, hits and max_loops may each be a value per token (N,) (`stacked`).
    """

    def __init__(
        self,
        criterion: Criterion,
        threshold: PerRow | None = None,
        hits: PerRow | None = None,
        min_loops: int = 1,
        max_loops: PerRow | None = None,
    ) -> None:
        threshold = criterion.default_threshold if threshold is None else threshold
        if threshold is None:
            raise ValueError(f"{criterion.name} needs a threshold")
        self.criterion = criterion
        self.threshold = threshold if isinstance(threshold, Tensor) else float(threshold)
        self.counter = HitCounter(criterion.default_hits if hits is None else hits, min_loops, max_loops)
        self.running = torch.zeros(0, dtype=torch.long)
        self.last_value = torch.zeros(0)
        self._threshold = self.threshold

    @classmethod
    def stacked(cls, rules: Sequence[ExitRule], rows_each: int) -> ExitRule:
        """One rule over the rows of several rules' batches stacked in order, `rows_each` rows per rule: rows
        [i * rows_each, (i + 1) * rows_each) follow rules[i]. The rules may differ in threshold, hits and
        max_loops only; every row then exits exactly as it would under its own rule."""
        first = rules[0]
        if any(rule.criterion.describe() != first.criterion.describe() or rule.counter.min_loops
               != first.counter.min_loops or rule.max_loops is None for rule in rules):
            raise ValueError("stacked rules must share criterion, options and min_loops, each with a max_loops")

        def per_row(values: list[float], dtype: torch.dtype) -> Tensor:
            return torch.tensor(values, dtype=dtype).repeat_interleave(rows_each)

        return cls(first.criterion,  # stateless until `start`
                   per_row([rule.threshold for rule in rules], torch.float64),
                   per_row([rule.hits for rule in rules], torch.long), first.counter.min_loops,
                   per_row([rule.max_loops for rule in rules], torch.long))

    def spread(self, times: int) -> ExitRule:
        """A fresh rule over `times` rows for each of this rule's rows, in order (row i's setting on rows
        i * times .. (i + 1) * times − 1): a per-sequence rule applied to every position of its sequences."""
        def rows(value: PerRow | None) -> PerRow | None:
            return value.repeat_interleave(times) if isinstance(value, Tensor) else value

        return ExitRule(self.criterion, rows(self.threshold), rows(self.counter.hits), self.counter.min_loops,
                        rows(self.counter.max_loops))

    @property
    def name(self) -> str:
        return self.criterion.name

    @property
    def needs_logits(self) -> bool:
        return self.criterion.needs_logits

    @property
    def hits(self) -> PerRow:
        return self.counter.hits

    @property
    def max_loops(self) -> int | None:
        """The most loops any token may run."""
        return self.counter.most_loops

    @property
    def fixed_loops(self) -> int | None:
        """The loop count of a rule that never exits early and stops every token at the same step (autoregressive
        decoding at a fixed depth); None for any other rule."""
        limit = self.counter.max_loops
        return limit if isinstance(self.criterion, FixedDepth) and isinstance(limit, int) else None

    @property
    def k(self) -> int:
        """Steps taken so far."""
        return self.counter.k

    def start(self, x0: Tensor) -> None:
        """Begin a group with its input x^(0) (N, C): every token running, no hits, no history."""
        self.criterion.reset(x0)
        self.counter.reset(x0.shape[0], x0.device)
        self.running = torch.arange(x0.shape[0], device=x0.device)
        self._threshold = _rows(self.threshold, x0.shape[0], x0.device, at_least_float32(x0).dtype)

    def step(self, x: Tensor, logits: Tensor | None = None) -> Tensor:
        """Take x^(k) (n, C) of the n tokens still running (and their logits (n, V) if the criterion needs
        them); return exit_now (n,) bool. `last_value` keeps this step's criterion values (n,)."""
        if x.shape[0] != self.running.numel():
            raise ValueError(f"step got {x.shape[0]} states, {self.running.numel()} tokens are running")
        if self.needs_logits and logits is None:
            raise ValueError(f"{self.name} needs the logits of the current states")
        value = self.criterion.score(x, logits)
        exit_now = self.counter.update(value < self._threshold)  # NaN is never a hit
        keep = ~exit_now
        self.criterion.select(keep)
        self.counter.select(keep)
        self.running = self.running[keep]
        self._threshold = _kept(self._threshold, keep)
        self.last_value = value
        return exit_now

    def describe(self) -> dict[str, Any]:
        def plain(value: PerRow | None) -> Any:
            return value.tolist() if isinstance(value, Tensor) else value

        return {**self.criterion.describe(), "threshold": plain(self.threshold), "hits": plain(self.hits),
                "min_loops": self.counter.min_loops, "max_loops": plain(self.counter.max_loops)}

    def __repr__(self) -> str:
        return f"ExitRule({self.describe()})"


def head_decode(model: Any, x: Tensor) -> Tensor:
    """The "head" decode: the final norm and LM head on a state."""
    return model.logits_of(x)


# --- building rules from plain specs -----------------------------------------------------------------------

CRITERIA: dict[str, type[Criterion]] = {
    "fixed": FixedDepth,
    "acceleration": Acceleration,
    "step_norm": StepNorm,
    "kl": KL,
    "entropy_difference": EntropyDifference,
    "latent_difference": LatentDifference,
    "cosine": Cosine,
    "argmax": ArgmaxStability,
}
_OPTIONS: dict[str, tuple[str, ...]] = {  # criterion-specific keys of a spec
    "fixed": ("loops",),
    "acceleration": ("variant",),
    "step_norm": ("relative",),
    "kl": ("decode",),
    "entropy_difference": ("decode",),
    "argmax": ("decode",),
}
_COMMON = ("criterion", "threshold", "hits", "min_loops", "max_loops")


def make_rule(spec: dict[str, Any] | str, max_loops: int | None = None) -> ExitRule:
    """An ExitRule from a plain spec, e.g.

        {"criterion": "acceleration", "variant": "vector", "threshold": 1e-3, "hits": 2}
        {"criterion": "step_norm", "relative": True, "threshold": 1e-2}
        {"criterion": "kl", "decode": "head"}          # threshold 5e-4, one hit
        {"criterion": "fixed", "loops": 4}
        "cosine"                                       # = {"criterion": "cosine"}, Huginn's defaults

    Common keys: threshold (default: the criterion's; acceleration and step_norm need one), hits, min_loops,
    max_loops (the spec's wins over the argument). "fixed" takes loops (its max_loops) and no threshold or
    hits; "argmax" takes hits and no threshold. Unknown names or keys raise ValueError.
    """
    spec = {"criterion": spec} if isinstance(spec, str) else dict(spec)
    name = spec.get("criterion")
    if name not in CRITERIA:
        raise ValueError(f"unknown exit criterion {name!r}; known: {', '.join(CRITERIA)}")
    allowed = _COMMON + _OPTIONS.get(name, ())
    unknown = sorted(set(spec) - set(allowed))
    if unknown:
        raise ValueError(f"{name}: unknown keys {unknown}; allowed: {', '.join(allowed)}")
    options = {key: spec[key] for key in _OPTIONS.get(name, ()) if key in spec}
    max_loops = spec.get("max_loops", max_loops)
    if name == "fixed":
        if "loops" not in options or set(spec) & {"threshold", "hits", "min_loops"}:
            raise ValueError("fixed takes loops (and nothing but max_loops >= loops)")
        loops = int(options["loops"])
        if max_loops is not None and loops > max_loops:
            raise ValueError(f"fixed loops {loops} > max_loops {max_loops}")
        return ExitRule(FixedDepth(), hits=1, max_loops=loops)
    if name == "argmax" and "threshold" in spec:
        raise ValueError("argmax has no threshold; set hits (consecutive unchanged steps, default 5)")
    return ExitRule(CRITERIA[name](**options), spec.get("threshold"), spec.get("hits"),
                    spec.get("min_loops", 1), max_loops)
