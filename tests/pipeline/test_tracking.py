"""The MLflow store the stages log to: a model-training experiment, so that the UI opens on its runs."""

from __future__ import annotations

import mlflow
import pytest

from twoscale.pipeline import tracking


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    return tmp_path


def kind(store) -> str | None:
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")
    return client.get_experiment_by_name("twoscale").tags.get("mlflow.experimentKind")


def test_a_new_store_holds_a_model_training_experiment(store):
    tracking.ensure_store()
    assert kind(store) == "custom_model_development"


def test_an_experiment_made_before_gets_the_kind(store):
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    mlflow.create_experiment("twoscale", tags={"mlflow.experimentKind": "genai_development"})
    tracking.ensure_store()
    assert kind(store) == "custom_model_development"
