"""The one-GPU parameter set (configs/gpu.yaml) at the paper's shape, shrunk in everything but the shape (batch 1,
at most 2 loops, two training steps, one tiny job of each kind), through the whole workflow on the CPU: what CI
can check of the GPU path without a GPU, namely shapes, dtypes and the device handling of every stage."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import yaml
from workspace import ROOT, copy_repository, run

from twoscale.config.parameter_files import read_raw

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def paper_shape_on_cpu(gpu: dict) -> dict:
    """configs/gpu.yaml with its model section untouched and every size that is not the model's shrunk."""
    params = yaml.safe_load(yaml.safe_dump(gpu))
    params["runtime"].update(device="cpu", threads=1)
    params["data"]["max_chars"] = 200_000
    params["tokenize"]["vocab_size"] = 4096
    params["train"].update(steps=2, batch_size=1, warmup_steps=1, eval_every=1, eval_batches=1, checkpoint_steps=[2])
    params["train"]["loops"].update(distribution="uniform", max=2, backprop_depth=1)
    params["recipes"] = {"huginn": gpu["recipes"]["huginn"]}
    # four loops: the spectrum stage's late half (k > K/2) needs two steps to compare; beyond them, twice as many
    params["measure"].update(threads=1, n_sequences=1, batch_size=1, max_loops=4, loss_loops=[1, 2],
                             beyond_loops=[8], precision_sequences=1)
    params["spectrum"].update(threads=1, n_windows=1, positions=2, n_eigenvalues=2)
    params["lens"].update(threads=1, n_windows=1, batch_size=1)
    params["sweep"].update(threads=1, max_loops=2, n_windows=1, batch_size=1, n_prompts=1, new_tokens=2)
    params["sweep"]["strategies"] = {"fixed": {"spec": {"criterion": "fixed"}, "settings": [1, 2]},
                                     "acceleration": {**gpu["sweep"]["strategies"]["acceleration"],
                                                      "settings": [0, 1, float("inf")]}}
    params["sample"].update(threads=1, loops=2, n_prompts=1, new_tokens=2, baseline_loops=[1, 2], inner_loops=[1],
                            tolerances=[0.1])
    params["distill"].update(threads=1, blocks=[1], n_windows=1, batch_size=1, train_batch_size=1, phase_steps=1,
                             rollout_steps=1, dynamics_loops=2)
    return params


@pytest.fixture(scope="module")
def paper_shape_run(tmp_path_factory) -> Path:
    params = tmp_path_factory.mktemp("params") / "paper_shape.yaml"
    params.write_text(yaml.safe_dump(paper_shape_on_cpu(read_raw(ROOT / "configs/gpu.yaml"))))
    repo = copy_repository(tmp_path_factory.mktemp("paper_shape") / "repo", params)
    run(["snakemake", "--cores", "2"], repo)
    return repo


def test_every_stage_runs_at_the_paper_shape(paper_shape_run):
    gpu = read_raw(ROOT / "configs/gpu.yaml")
    metrics = json.loads((paper_shape_run / "results/train/huginn/seed_1337/metrics.json").read_text())
    # GPT-2 small's 12 layers of 7.08M weights, embeddings for 512 positions, the adapters: about 100M parameters
    model = gpu["model"]
    layers = model["n_layer"] * 12 * model["n_embd"] ** 2
    assert metrics["parameters"] > layers + model["block_size"] * model["n_embd"]
    assert metrics["step"] == 2 and metrics["mfu"] > 0 and metrics["device"].startswith("cpu")
    sweep = pl.read_csv(paper_shape_run / "results/sweep/summary.csv")
    assert set(sweep["strategy"]) == {"fixed", "acceleration"}
    assert (paper_shape_run / "results/sample/huginn/seed_1337/summary.csv").is_file()
    assert (paper_shape_run / "results/surrogates/recovery.csv").is_file()
    assert (paper_shape_run / "results/claims.md").is_file()
    # the GPU set takes the exact Jacobian at the paper's width (Arnoldi is for widths beyond it)
    spectrum = pl.read_parquet(paper_shape_run / "results/spectrum/huginn/seed_1337/step_2.parquet")
    assert set(spectrum["method"]) == {"exact"} and spectrum["eigenvalues_real"].list.len().to_list() == [2] * 6
