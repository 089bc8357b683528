"""Typed model of params.yaml: the single source of every parameter.

`load_params` validates a file and raises `ParamsError` with one line that names the key, the value and what was
expected. `params_schema` is the JSON schema that Snakemake's `validate` uses (generated into workflow/schemas/).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    model_validator,
)

from twoscale.config.errors import TwoscaleError

# Whole numbers and switches are taken as written, never converted: 5.0, "5" or true where a count belongs would
# otherwise pass validation as 5 while the orchestrators write "5.0" into paths (step_5.0.pt, seed_1.0).
PositiveInt = Annotated[StrictInt, Field(gt=0)]
NonNegativeInt = Annotated[StrictInt, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
# A seed seeds torch's generators, which take any integer but fold negative ones onto 2**64 + seed (-1 and 2**64 - 1
# give the same weights); within this range every seed is its own generator state.
MAX_SEED = 2**32 - 1
Seed = Annotated[StrictInt, Field(ge=0, le=MAX_SEED)]
# Every seed is a run of every recipe and every setting a decoding of the sweep: past these a parameter set is a
# typo, and Snakemake would plan it for minutes before saying anything
MAX_SEEDS = 64
MAX_SETTINGS = 128


class ParamsError(TwoscaleError):
    """A parameter file that cannot be used."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # every number finite...


class RuntimeParams(Section):
    device: Literal["auto", "cpu", "cuda"] = Field(description="auto picks CUDA when present, else CPU")
    threads: PositiveInt = Field(description="torch intra-op threads (set the same under Snakemake and DVC)")
    precision: Literal["auto", "fp32", "bf16"] = Field(
        description="training arithmetic: bf16 autocast or fp32 (auto: bf16 where the device multiplies bf16 "
        "natively, else fp32); measure and sweep always run in fp32"
    )
    seeds: list[Seed] = Field(
        min_length=1, max_length=MAX_SEEDS,
        description=f"one training run per recipe and seed; a seed (0 to {MAX_SEED}) sets every random choice of "
        "its run",
    )
    explain_seeds: list[Seed] = Field(
        min_length=1,
        description="the seeds (of seeds) whose runs also get the stages that explain or illustrate but score no "
        "claim: spectrum, lens, precision, beyond, the distillation curve (distill.curve_blocks) and the latency "
        "figure's points that no verdict compares; every seed gets the stages the verdicts read",
    )
    compile: bool = Field(
        description="compile each layer for training (torch.compile; on a CPU it needs a C++ compiler): faster "
        "steps, the same model up to rounding"
    )

    @model_validator(mode="after")
    def _distinct_seeds(self) -> RuntimeParams:
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds {self.seeds} repeat a seed")
        if len(set(self.explain_seeds)) != len(self.explain_seeds):
            raise ValueError(f"explain_seeds {self.explain_seeds} repeat a seed")
        unknown = [seed for seed in self.explain_seeds if seed not in self.seeds]
        if unknown:
            raise ValueError(f"explain_seeds: {unknown[0]} is not in seeds {self.seeds}")
        return self


class HuggingfaceSource(Section):
    dataset: str = Field(description="dataset name on the hub, or a local path saved with save_to_disk / data files")
    config: str | None = Field(description="dataset configuration name (null for none)")
    split: str
    text_field: str = Field(description="column that holds the document text")
    max_documents: PositiveInt | None = Field(description="stop after this many documents (null: all)")


class DataParams(Section):
    source: Literal["shakespeare", "public_domain", "text", "huggingface"]
    text_files: list[str] = Field(description="files or globs, read when source is 'text'")
    huggingface: HuggingfaceSource
    max_chars: PositiveInt | None = Field(description="truncate the corpus to this many characters (null: all)")
    val_fraction: float = Field(gt=0, lt=0.5, description="tail fraction of every document held out for validation")


class TokenizeParams(Section):
    vocab_size: StrictInt = Field(ge=260, le=65535,
                                  description="byte-level BPE vocabulary size, special tokens included")


class LoopGroup(Section):
    first: NonNegativeInt = Field(description="first layer of the group (0-based)")
    last: NonNegativeInt = Field(description="last layer of the group (inclusive)")

    @model_validator(mode="after")
    def _ordered(self) -> LoopGroup:
        if self.last < self.first:
            raise ValueError(f"group last ({self.last}) is before first ({self.first})")
        return self


class ModelParams(Section):
    n_layer: PositiveInt
    n_head: PositiveInt
    n_embd: PositiveInt
    block_size: PositiveInt = Field(description="context length in tokens")
    dropout: float = Field(ge=0, lt=1)
    bias: StrictBool = Field(description="biases in linear layers and layer norms")
    groups: list[LoopGroup] = Field(
        description="looped groups as inclusive layer ranges (recipes need one at least; teachers have none)"
    )
    norm: Literal["pre", "sandwich", "group", "rescale"] = Field(
        description="pre: pre-LayerNorm blocks (GPT-2, the paper); sandwich: also normalise each residual sum "
        "(Geiping et al.); group: a LayerNorm on the output of every application of a looped group; rescale: "
        "that output rescaled per token to the norm of the group input (no parameters)"
    )
    injection: Literal["none", "add", "adapter"] = Field(
        description="how each application of a looped group reads the group input x0: none; add: state + W x0 "
        "(W starts at 0); adapter: W concat(state, x0) (Geiping et al.; W starts at [I 0])"
    )
    scale_embedding: StrictBool = Field(
        description="multiply token embeddings by sqrt(n_embd) (Geiping et al.; the LM head shares their weight)"
    )

    @model_validator(mode="after")
    def _consistent(self) -> ModelParams:
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) is not divisible by n_head ({self.n_head})")
        previous_last = -1
        for group in self.groups:
            if group.last >= self.n_layer:
                raise ValueError(f"group {group.first}-{group.last} is outside layers 0-{self.n_layer - 1}")
            if group.first <= previous_last:
                raise ValueError(f"group {group.first}-{group.last} overlaps or precedes the group before it")
            previous_last = group.last
        return self


class LoopSchedule(Section):
    distribution: Literal["fixed", "uniform", "poisson_lognormal"] = Field(
        description="fixed: always `max`; uniform: uniform in [1, max]; poisson_lognormal: "
        "Poisson(exp(t))+1 with t ~ N(log(mean) - sigma^2/2, sigma), clipped to max (Geiping et al.)"
    )
    mean: PositiveFloat = Field(description="mean rate of the Poisson-lognormal distribution")
    sigma: PositiveFloat = Field(description="log-normal spread of the Poisson-lognormal distribution")
    max: PositiveInt = Field(description="most loops per group in one training step")
    backprop_depth: PositiveInt = Field(description="gradients flow through the last this-many loop steps only")
    straight_through: StrictBool = Field(
        description="pass the gradient across the earlier loop steps as if they were the identity, so the layers "
        "before a group still learn when it loops more than backprop_depth times (false: the gradient stops there)"
    )


class TrainParams(Section):
    steps: PositiveInt
    batch_size: PositiveInt
    learning_rate: PositiveFloat
    min_lr_ratio: float = Field(ge=0, le=1, description="cosine schedule floor, as a fraction of learning_rate")
    warmup_steps: NonNegativeInt
    weight_decay: float = Field(ge=0)
    beta1: float = Field(ge=0, lt=1)
    beta2: float = Field(ge=0, lt=1)
    grad_clip: PositiveFloat
    loops: LoopSchedule
    eval_loops: PositiveInt = Field(description="loops per group when measuring validation loss")
    eval_every: PositiveInt = Field(description="steps between validation-loss measurements")
    eval_batches: PositiveInt = Field(description="batches averaged per validation-loss measurement")
    checkpoint_steps: list[PositiveInt] = Field(
        min_length=1, description="steps after which a checkpoint is saved; strictly increasing, the last is `steps`"
    )

    @model_validator(mode="after")
    def _checkpoints_cover_training(self) -> TrainParams:
        steps = self.checkpoint_steps
        if any(b <= a for a, b in zip(steps, steps[1:])):
            raise ValueError(f"checkpoint_steps {steps} are not strictly increasing")
        if steps[-1] != self.steps:
            raise ValueError(f"the last checkpoint step ({steps[-1]}) must equal steps ({self.steps})")
        if self.warmup_steps >= self.steps:
            raise ValueError(f"warmup_steps ({self.warmup_steps}) must be below steps ({self.steps})")
        return self


# Recipe, teacher and strategy names become folder names and command arguments: a safe, short alphabet only.
NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")


def check_name(section: str, name: str, kind: str) -> None:
    """ValueError in one line unless `name`, a key of `section`, is a valid name of a `kind`."""
    if not NAME.fullmatch(name):
        shown = name if name.isprintable() and len(name) <= 64 else repr(name[:64]) + "..." * (len(name) > 64)
        raise ValueError(f"{section}.{shown}: a {kind} name is 1 to 64 lower case letters, digits and _, "
                         "starting with a letter")


SHARED_TRAIN_KEYS = ("steps", "checkpoint_steps")  # recipes are compared at the same checkpoints


class Recipe(Section):
    """Named model and training choices: keys of the shared `model` and `train` sections that this recipe
    changes (nested keys such as train.loops merge key by key); a key it leaves out keeps the shared value."""

    model: dict[str, Any] = Field(default_factory=dict, description="model keys this recipe changes")
    train: dict[str, Any] = Field(
        default_factory=dict,
        description="train keys this recipe changes (not steps or checkpoint_steps: recipes share checkpoints)",
    )


def merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """base with changes applied key by key; nested mappings merge, everything else is replaced."""
    out = dict(base)
    for key, value in changes.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def overlaid(base: dict[str, Any], changes: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """An overlay's changes over its base, as `merge`, where a mapping set to null is removed (a parameter set's way
    to drop a recipe, teacher or strategy of the base); null for a key the base lacks names nothing to drop, a
    ParamsError."""
    out = dict(base)
    for key, value in changes.items():
        name = f"{prefix}{key}"
        if value is None and isinstance(out.get(key), dict):
            del out[key]
        elif value is None and key not in out:
            raise ParamsError(f"{name}: null drops an entry of the base, which has none of this name")
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = overlaid(out[key], value, f"{name}.")
        else:
            out[key] = value
    return out


@dataclass(frozen=True)
class RunParams:
    """One training run of the workflow: a recipe's model and train sections, and a seed."""

    recipe: str
    seed: int
    model: ModelParams
    train: TrainParams

    @property
    def tags(self) -> dict[str, str]:
        """How MLflow and the tables name the run."""
        return {"recipe": self.recipe, "seed": str(self.seed)}


class MeasureParams(Section):
    threads: PositiveInt = Field(description="torch threads per measure job (jobs run in parallel, one per checkpoint)")
    n_sequences: PositiveInt = Field(description="held-out windows of model.block_size tokens measured per checkpoint")
    batch_size: PositiveInt = Field(description="windows per forward pass (memory: all iterates of a batch are kept)")
    max_loops: PositiveInt = Field(description="every group is looped this many times while measuring")
    loss_loops: list[PositiveInt] = Field(min_length=1, description="loop counts (all groups) for loss vs loops")
    beyond_loops: list[PositiveInt] = Field(min_length=1, description="more loop counts whose loss the final "
                                            "checkpoint alone measures (beyond those of training, for S); the beyond "
                                            "stage measures its geometry at the largest")
    n_phases: PositiveInt = Field(description="contiguous phases the unrolled depth is split into (max-cut)")
    trajectory_token: NonNegativeInt = Field(description="position in the first window whose path Fig. 1 draws")
    precisions: list[Literal["float64", "float32", "bfloat16"]] = Field(
        min_length=1, description="the arithmetic the precision stage runs each checkpoint in (the precision "
        "question: docs/methods.md#in-which-precision)")
    precision_sequences: PositiveInt = Field(description="held-out windows the precision stage measures per "
                                             "checkpoint and precision (the first of measure's)")


class SpectrumParams(Section):
    threads: PositiveInt = Field(description="torch threads, and threads taking the exact Jacobians' eigenvalues, per "
                                 "spectrum job (one job per checkpoint, run in parallel)")
    n_windows: PositiveInt = Field(description="held-out windows whose tokens are sampled (the first of measure's)")
    positions: PositiveInt = Field(description="every position 0..positions-1 of each window is sampled: a token's "
                                   "prefix radius needs the blocks of all earlier positions anyway")
    n_eigenvalues: PositiveInt = Field(description="leading eigenvalues kept per token (by modulus)")
    exact_max_width: PositiveInt = Field(description="the exact Jacobian (torch.func, one backward pass per "
                                         "coordinate) up to this model width; above it, Arnoldi on Jacobian-vector "
                                         "products")


class LensParams(Section):
    threads: PositiveInt = Field(description="torch threads per lens job (one job per checkpoint, run in parallel)")
    n_windows: PositiveInt = Field(description="held-out windows decoded at every loop step (the first of measure's)")
    batch_size: PositiveInt = Field(description="windows per forward pass (all iterates of a batch are kept)")


class SweepStrategy(Section):
    spec: dict[str, Any] = Field(
        description="exit spec without the swept setting, e.g. {criterion: acceleration, variant: vector, hits: 2}"
    )
    # ...but a threshold may be .inf; not -.inf or NaN, which a build record (strict JSON, where .inf is null)
    # could not tell from .inf
    settings: list[Annotated[float, Field(allow_inf_nan=True, ge=0)]] = Field(
        min_length=1, max_length=MAX_SETTINGS, description="swept values: thresholds (.inf: exit at once, 0: never), "
        "or the loop counts of fixed, or the hit counts of argmax"
    )
    timed: StrictBool = Field(True, description="timed by the latency stage; an untimed strategy is compared by "
                        "quality and FLOPs only, and a speed verdict that needs its latency is inconclusive")


class SweepParams(Section):
    threads: PositiveInt = Field(description="torch threads per sweep job (one job per strategy, run in parallel) "
                                 "and of the latency job, which runs alone")
    max_loops: PositiveInt = Field(description="most loops per group; full depth runs every group this many times")
    n_windows: PositiveInt = Field(description="held-out windows of model.block_size tokens for cross-entropy")
    batch_size: PositiveInt = Field(description="windows decoded together, teacher-forced")
    cache_mb: PositiveInt = Field(description="most memory of the KV cache of one teacher-forced batch: a strategy's "
                                  "settings decode together as rows of a batch, as many at a time as fit "
                                  "(at least one)")
    n_prompts: PositiveInt = Field(description="held-out prompts generated from at batch size 1 to time tokens")
    prompt_tokens: PositiveInt = Field(description="tokens per prompt")
    new_tokens: PositiveInt = Field(description="tokens generated per prompt; a round's latency is the median over "
                                    "all")
    rounds: StrictInt = Field(ge=2, description="latency rounds of the points the verdicts compare (full depth, the "
                        "best fixed depth, each strategy's best point); two points' timings of one round are a pair")
    figure_rounds: StrictInt = Field(ge=1, description="latency rounds of every other setting of every timed "
                                     "strategy (the first rounds: they time every setting once)")
    strategies: dict[str, SweepStrategy] = Field(
        min_length=1, description="exit strategies by name; 'fixed' (the fixed-depth baseline) is required"
    )

    @model_validator(mode="after")
    def _fixed_is_the_reference(self) -> SweepParams:
        """The exit specs themselves are checked where exits are known (`twoscale.exits.sweep`)."""
        if "fixed" not in self.strategies or self.strategies["fixed"].spec.get("criterion") != "fixed":
            raise ValueError("strategies need 'fixed' with spec {criterion: fixed}: the full-depth reference")
        if self.max_loops not in self.strategies["fixed"].settings:
            raise ValueError(f"strategies.fixed.settings must include max_loops ({self.max_loops}): full depth")
        if not self.strategies["fixed"].timed:
            raise ValueError("strategies.fixed must be timed: every latency ratio is read against a fixed depth")
        if self.figure_rounds > self.rounds:
            raise ValueError(f"figure_rounds ({self.figure_rounds}) must not exceed rounds ({self.rounds})")
        return self


class SampleParams(Section):
    recipes: list[str] = Field(
        description="recipes to sample from (may be none); each needs input injection (model.injection)"
    )
    threads: PositiveInt = Field(description="torch threads per sample job (one job per recipe and seed)")
    loops: PositiveInt = Field(
        description="the full recurrence: the prompt's prefill, the most iterations a position runs before it "
        "freezes, and the autoregressive decoding the sampler is compared with (the paper: 32)"
    )
    n_prompts: PositiveInt = Field(description="held-out prompts, greedy decoding at batch size 1")
    prompt_tokens: PositiveInt = Field(description="tokens per prompt")
    new_tokens: PositiveInt = Field(description="tokens generated per prompt")
    baseline_loops: list[PositiveInt] = Field(
        min_length=1, description="cached autoregressive decoding at these loop counts (must include loops)"
    )
    inner_loops: list[PositiveInt] = Field(min_length=1, description="r': iterations per outer step (the grid)")
    tolerances: list[Annotated[float, Field(ge=0)]] = Field(
        min_length=1, description="freeze tolerance epsilon on the relative change of a position's state (the grid)"
    )
    freezes: list[Literal["latent_difference", "acceleration"]] = Field(
        min_length=1, description="freeze criteria (the grid): latent_difference ||s_t - s_t-1|| / ||s_t||, or the "
        "second difference (acceleration)"
    )
    embedding_ema: float = Field(ge=0, le=1, description="eta: e = eta e_prev + (1 - eta) P(y)")
    state_noise: float = Field(ge=0, le=1, description="beta: noise mixed into states, dampened by iterations")
    headway: PositiveInt = Field(description="new positions per outer step")
    max_wavefront: PositiveInt = Field(description="most active positions")
    init: Literal["input", "random"] = Field(
        description="how new positions start: input (the group input, as our models are trained) or random "
        "(Huginn's truncated normal)"
    )
    state_std: float = Field(ge=0, description="std of random states and of the noise (Huginn: 0.63)")
    quality_tolerance: float = Field(
        ge=0, description="nats: 'about equal quality' (C7) = mean re-scored cross-entropy within this much of "
        "autoregressive decoding at full recurrence, above or below"
    )
    distinct_tolerance: float = Field(
        ge=0, le=1, description="'about equal quality' (C7) also = distinct-token fraction of the continuation "
        "(mean over prompts) at most this much below autoregressive decoding at full recurrence"
    )
    repeats: StrictInt = Field(
        ge=2, description="paired rounds that time the chosen sampler setting beside autoregressive decoding at full "
        "recurrence and at the fewest loops of about equal quality (the speed verdicts' 95% intervals)"
    )

    @model_validator(mode="after")
    def _grid_fits(self) -> SampleParams:
        if self.loops not in self.baseline_loops:
            raise ValueError(f"baseline_loops must include loops ({self.loops}): the full-recurrence reference")
        too_many = [r for r in self.inner_loops if r > self.loops]
        if too_many:
            raise ValueError(f"inner_loops {too_many[0]} exceeds loops ({self.loops})")
        return self


class DistillParams(Section):
    threads: PositiveInt = Field(description="torch threads per phases, distill and surrogates job")
    blocks: list[PositiveInt] = Field(
        min_length=1, description="k: shared blocks of a surrogate (one per phase); one distill job per k and seed "
        "(C8 reads k = 2)"
    )
    curve_blocks: list[PositiveInt] = Field(
        description="further k, distilled for runtime.explain_seeds only: the rest of the recovery curve"
    )
    n_windows: PositiveInt = Field(
        description="held-out windows of model.block_size tokens for the phases, the evaluation and the dynamics"
    )
    batch_size: PositiveInt = Field(description="held-out windows per forward pass")
    train_batch_size: PositiveInt = Field(description="training windows per distillation step")
    phase_steps: PositiveInt = Field(description="stage 1: every block on its own phase")
    rollout_steps: PositiveInt = Field(description="stage 2: the whole surrogate rolled out from the embedding")
    learning_rate: PositiveFloat = Field(description="AdamW peak, cosine down to a tenth in each stage")
    anneal_fraction: float = Field(
        ge=0, le=1, description="stage 1's teacher-forcing weight falls from 1 to 0 over this fraction of its steps"
    )
    depth_hidden: PositiveInt = Field(description="width of each block's depth-conditioning MLP")
    layerscale_init: PositiveFloat = Field(description="initial LayerScale of both branches (Raptor: 1e-5)")
    dynamics_loops: PositiveInt = Field(
        description="loops per group of the looped recipes when their depth is compared with the teachers'"
    )

    @model_validator(mode="after")
    def _distinct_blocks(self) -> DistillParams:
        every = self.blocks + self.curve_blocks
        if len(set(every)) != len(every):
            raise ValueError(f"blocks {self.blocks} and curve_blocks {self.curve_blocks} repeat a value")
        return self

    def blocks_of(self, explained: bool) -> list[int]:
        """The k distilled for a seed, ascending: every k for a seed of runtime.explain_seeds, else `blocks`."""
        return sorted(self.blocks + self.curve_blocks if explained else self.blocks)


class Params(Section):
    runtime: RuntimeParams
    data: DataParams
    tokenize: TokenizeParams
    model: ModelParams
    train: TrainParams
    recipes: dict[str, Recipe] = Field(
        min_length=1, description="named model and training choices over the model and train sections; "
        "every stage after tokenize runs once per recipe and seed"
    )
    teachers: dict[str, Recipe] = Field(
        description="plain GPTs (no looped groups), trained like the recipes and distilled into block-recurrent "
        "surrogates; keys of the model and train sections that a teacher changes (may be none)"
    )
    measure: MeasureParams
    spectrum: SpectrumParams
    lens: LensParams
    sweep: SweepParams
    sample: SampleParams
    distill: DistillParams

    @model_validator(mode="after")
    def _recipes_build(self) -> Params:
        for name in self.sweep.strategies:
            check_name("sweep.strategies", name, "strategy")
        for name, recipe in self.recipes.items():
            check_name("recipes", name, "recipe")
            shared = [key for key in SHARED_TRAIN_KEYS if key in recipe.train]
            if shared:
                raise ValueError(f"recipes.{name}.train.{shared[0]}: shared by every recipe, set it in train")
            model, _ = self._resolve(name)
            if not model.groups:
                raise ValueError(f"recipes.{name}: a recipe loops (model.groups); a plain GPT goes under teachers")
            self._check_stages_fit(model, f"recipes.{name}: " if recipe.model else "")
        for name, teacher in self.teachers.items():
            self._check_teacher(name, teacher)
        for name in self.sample.recipes:
            if name not in self.recipes:
                raise ValueError(f"sample.recipes: {name!r} is not under recipes (known: {', '.join(self.recipes)})")
            if self._resolve(name)[0].injection == "none":
                raise ValueError(f"sample.recipes: {name!r} has no input injection (model.injection: none), "
                                 "which the parallel sampler needs")
        return self

    def _check_teacher(self, name: str, teacher: Recipe) -> None:
        where = f"teachers.{name}"
        check_name("teachers", name, "teacher")
        if name in self.recipes:
            raise ValueError(f"{where}: also a recipe name (they share results/train/<name>)")
        if "groups" in teacher.model:
            raise ValueError(f"{where}.model.groups: a teacher has no looped groups")
        shared = [key for key in SHARED_TRAIN_KEYS if key in teacher.train]
        if shared:
            raise ValueError(f"{where}.train.{shared[0]}: shared by every run, set it in train")
        model, _ = self._resolve(name)
        if model.norm != "pre":
            raise ValueError(f"{where}.model.norm: a teacher is a pre-LN GPT (the surrogate's blocks are pre-LN)")
        too_many = [k for k in self.distill.blocks_of(explained=True) if k > model.n_layer]
        if too_many:
            raise ValueError(f"distill: {too_many[0]} blocks for the {model.n_layer} layers of teacher {name!r}")

    def _resolve(self, name: str) -> tuple[ModelParams, TrainParams]:
        """A recipe's or a teacher's model and train sections (a teacher's model has no groups)."""
        if name in self.recipes:
            section_name, changes = "recipes", self.recipes[name]
            model_changes = changes.model
        else:
            section_name, changes = "teachers", self.teachers[name]
            model_changes = {**changes.model, "groups": []}
        sections = []
        pairs = (("model", self.model, model_changes), ("train", self.train, changes.train))
        for section, shared, section_changes in pairs:
            try:
                sections.append(type(shared).model_validate(merge(shared.model_dump(), section_changes)))
            except ValidationError as exc:
                raise ValueError(_describe_error(exc.errors()[0], f"{section_name}.{name}.{section}")) from None
        model, train = sections
        return model, train

    def _check_stages_fit(self, model: ModelParams, where: str) -> None:
        if self.measure.trajectory_token >= model.block_size:
            raise ValueError(
                f"{where}measure.trajectory_token ({self.measure.trajectory_token}) must be below "
                f"model.block_size ({model.block_size})"
            )
        if self.spectrum.positions > model.block_size:
            raise ValueError(f"{where}spectrum.positions ({self.spectrum.positions}) exceeds model.block_size "
                             f"({model.block_size})")
        if model.n_embd > self.spectrum.exact_max_width and self.spectrum.n_eigenvalues >= model.n_embd - 1:
            raise ValueError(f"{where}spectrum.n_eigenvalues ({self.spectrum.n_eigenvalues}) must be below "
                             f"model.n_embd - 1 ({model.n_embd - 1}) for Arnoldi")
        sweep = self.sweep
        if sweep.prompt_tokens + sweep.new_tokens > model.block_size:
            raise ValueError(
                f"{where}sweep.prompt_tokens + sweep.new_tokens ({sweep.prompt_tokens + sweep.new_tokens}) "
                f"exceeds model.block_size ({model.block_size})"
            )

        sample = self.sample
        if sample.prompt_tokens + sample.new_tokens > model.block_size:
            raise ValueError(
                f"{where}sample.prompt_tokens + sample.new_tokens ({sample.prompt_tokens + sample.new_tokens}) "
                f"exceeds model.block_size ({model.block_size})"
            )

    def runs(self) -> list[tuple[str, int]]:
        """Every (recipe, seed) pair, recipes in file order, then seeds."""
        return [(recipe, seed) for recipe in self.recipes for seed in self.runtime.seeds]

    def sample_runs(self) -> list[tuple[str, int]]:
        """The runs the sample stage works on: those of the recipes under sample.recipes, in run order."""
        return [(recipe, seed) for recipe, seed in self.runs() if recipe in self.sample.recipes]

    def explains(self, seed: int) -> bool:
        """Whether the seed's runs get the stages that only explain or illustrate (runtime.explain_seeds)."""
        return seed in self.runtime.explain_seeds

    def explained_runs(self) -> list[tuple[str, int]]:
        """The runs the explaining stages work on (spectrum, lens, precision, beyond): recipes in file order, then
        the seeds of runtime.explain_seeds in theirs (read without runtime.seeds, so that another seed leaves the
        stages that gather these runs alone)."""
        return [(recipe, seed) for recipe in self.recipes for seed in self.runtime.explain_seeds]

    def teacher_runs(self) -> list[tuple[str, int]]:
        """Every (teacher, seed) pair, teachers in file order, then seeds."""
        return [(teacher, seed) for teacher in self.teachers for seed in self.runtime.seeds]

    def run(self, recipe: str, seed: int) -> RunParams:
        """The parameters of one run of a recipe or a teacher; one line naming what is wrong if the name or the
        seed is not in the file."""
        if recipe not in self.recipes and recipe not in self.teachers:
            known = ", ".join([*self.recipes, *self.teachers])
            raise ParamsError(f"{recipe!r} is neither under recipes nor under teachers (known: {known})")
        if seed not in self.runtime.seeds:
            raise ParamsError(f"seed {seed} is not in runtime.seeds {self.runtime.seeds}")
        model, train = self._resolve(recipe)
        return RunParams(recipe, seed, model, train)


def _describe_error(error: dict[str, Any], prefix: str = "") -> str:
    """One line for a pydantic error; `prefix` is the key of the section that was validated, if nested."""
    parts = [str(part) for part in error["loc"]]
    location = ".".join([prefix, *parts] if prefix else parts)
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "missing":
        return f"{location}: missing (required key)"
    if error["type"] == "extra_forbidden":
        return f"{location}: unknown key"
    if isinstance(error["input"], dict) and error["type"] == "value_error":  # a check across a section's keys
        return f"{location}: {message}" if location else message
    return f"{location} = {_shown_value(error['input'])}: {message}" if location else message


def _shown_value(value: Any, most: int = 80) -> str:
    """The value as written, cut short where it is long (a list of 100,000 seeds)."""
    shown = repr(value)
    if len(shown) <= most:
        return shown
    return f"{shown[:most]}... ({len(value)} items)" if isinstance(value, (list, dict)) else f"{shown[:most]}..."


def parse_params(raw: Any, source: str = "params") -> Params:
    """Validate a parsed YAML mapping; raise ParamsError naming the first bad key."""
    if not isinstance(raw, dict):
        raise ParamsError(f"{source}: expected a mapping of sections, got {type(raw).__name__}")
    try:
        return Params.model_validate(raw)
    except ValidationError as exc:
        errors = exc.errors()
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ParamsError(f"{source}: {_describe_error(errors[0])}{more}") from None


def params_schema() -> dict[str, Any]:
    schema = Params.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "twoscale params.yaml"
    return schema


HASH_CHARS = 16  # of the hex digests that name parameter sets, data and snapshots


def params_hash(*sections: BaseModel) -> str:
    """Short stable hash of some parameter sections (tags runs, keys resumable state)."""
    blob = json.dumps([s.model_dump(mode="json") for s in sections], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:HASH_CHARS]
