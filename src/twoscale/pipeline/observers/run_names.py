"""What both sides of tracking name alike: the job's side (`tracking`) and the store's (`mlflow_store`, which loads
MLflow): the experiment, the tags that tie a run to the process that opened it, and a store by its file or URI."""

from __future__ import annotations

from urllib.parse import urlsplit

EXPERIMENT = "twoscale"
INVOCATION_TAG = "twoscale.invocation"
HOST_TAG, PID_TAG, PROCESS_START_TAG = "twoscale.host", "twoscale.pid", "twoscale.process_start"
DESCRIPTION_TAG = "mlflow.note.content"  # what the MLflow UI shows as an experiment's or a run's description
STAGE_GROUP_TAG = "twoscale.stage_group"  # on the run gathering one invocation's jobs of a stage: the stage
PARENT_TAG = "mlflow.parentRunId"  # what MLflow nests a run under
OWNER_TAGS = (HOST_TAG, PID_TAG, PROCESS_START_TAG)


def is_sqlite(uri: str) -> bool:
    return urlsplit(uri).scheme.lower() == "sqlite"


def store_name(uri: str) -> str:
    """The file of a SQLite store, else the URI."""
    return uri.split(":///", 1)[1] if is_sqlite(uri) else uri
