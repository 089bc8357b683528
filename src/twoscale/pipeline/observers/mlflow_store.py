"""The MLflow store's side of tracking: every call that needs MLflow itself, on runs named by their ids.

A job does not call these directly (importing MLflow and opening its SQL store cost it seconds): `tracking` sends
them to the writer of `tracking_writer`, which holds one `Store` for the whole workflow, or runs them in its own
process where MLflow is loaded already. Every operation takes and returns plain values, so that either way is the
same call.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import mlflow
import mlflow.pyfunc
import numpy as np
import psutil
from mlflow.entities import DatasetInput, InputTag, Metric
from mlflow.models import Model

from twoscale.config.errors import TwoscaleError, first_line
from twoscale.pipeline.observers import run_names
from twoscale.pipeline.observers.run_names import (
    DESCRIPTION_TAG,
    HOST_TAG,
    INVOCATION_TAG,
    OWNER_TAGS,
    PARENT_TAG,
    PID_TAG,
    PROCESS_START_TAG,
    STAGE_GROUP_TAG,
    store_name,
)

# the MLflow UI opens a model-training experiment on its runs table (a GenAI one on traces and an assistant), and
# shows the note as the experiment's description
EXPERIMENT_TAGS = {
    "mlflow.experimentKind": "custom_model_development",
    DESCRIPTION_TAG: "The runs of the twoscale workflow: one parent run per pipeline invocation (Snakemake or DVC), "
                     "nested under it one run per stage, and under that one run per stage job, tagged with its stage "
                     "and, where it has them, recipe and seed (filter: tags.stage = 'train'). A training logs its "
                     "curves under train/ and val/, its final numbers under final/, its corpus as a dataset and its "
                     "model to the registry.",
}
DATASET_DIGEST_CHARS = 36  # the most of a dataset's digest an MLflow store keeps
DATASET_ATTEMPTS = 3
DATASET_CONTEXT_TAG = "mlflow.data.context"
BATCH_METRICS = 1000  # the most metrics MLflow's log_batch takes in one call


def is_server(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def artifact_location(uri: str, root: Path) -> str | None:
    """Where a new experiment of the store at `uri` keeps its artifacts: `<root>/mlartifacts`, or, behind a
    tracking server, where the server chooses (its --artifacts-destination: a path of this machine is wrong on
    another node)."""
    if is_server(uri):
        return None
    return (root / "mlartifacts").as_uri()


HEALTH_PROBE = "/api/2.0/mlflow/experiments/search?max_results=1"


def check_server_answers(uri: str, timeout: float) -> None:
    """TwoscaleError in one line unless the tracking server at `uri` answers a call of its API (any HTTP status: a
    proxy asking for credentials answers too) within `timeout` seconds."""
    import urllib.error
    import urllib.request

    try:
        # a call of its API, not its health page alone: a server whose health page answers while its store stalls
        # would hold every later request for MLflow's timeouts and retries (two minutes)
        with urllib.request.urlopen(uri.rstrip("/") + HEALTH_PROBE, timeout=timeout):
            pass
    except urllib.error.HTTPError:
        pass
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TwoscaleError(f"MLflow tracking server {uri} did not answer within {timeout:g} s ({reason}): start "
                            "it, or unset MLFLOW_TRACKING_URI to log to mlflow.db") from None


def owner_alive(tags: dict[str, str]) -> bool:
    try:
        return int(psutil.Process(int(tags[PID_TAG])).create_time()) == int(tags[PROCESS_START_TAG])
    except (psutil.Error, KeyError, ValueError):
        return False


class Store:
    """The MLflow store at `uri` (its experiment's artifacts under `root`), one operation per method."""

    def __init__(self, uri: str, root: Path, server_timeout: float):
        self.uri, self.root, self.server_timeout = uri, root, server_timeout
        self.monitors: dict[str, Any] = {}  # run id -> its system metrics sampler
        self._client: mlflow.MlflowClient | None = None

    @property
    def client(self) -> mlflow.MlflowClient:
        if self._client is None:
            self.experiment_id()
        return self._client

    def experiment_id(self) -> str:
        """Create the store and the experiment if needed; return the experiment's id. A server that does not
        answer or a store that cannot be opened is a TwoscaleError naming it."""
        if is_server(self.uri):
            check_server_answers(self.uri, self.server_timeout)
        database_log = logging.getLogger("mlflow.store.db.utils")  # logs a failing query with its traceback
        level = database_log.level
        database_log.setLevel(logging.CRITICAL)
        try:
            if self._client is None:
                self._client = mlflow.MlflowClient(tracking_uri=self.uri)
            return self._find_or_create_experiment()
        except Exception as exc:  # MLflow, SQLAlchemy and requests raise many types; the first line says which
            raise TwoscaleError(f"{store_name(self.uri)}: the MLflow store cannot be used "
                                f"({first_line(exc)})") from None
        finally:
            database_log.setLevel(level)

    def _find_or_create_experiment(self) -> str:
        experiment = self._client.get_experiment_by_name(run_names.EXPERIMENT)
        if experiment is None:
            return self._client.create_experiment(run_names.EXPERIMENT, tags=EXPERIMENT_TAGS,
                                                  artifact_location=artifact_location(self.uri, self.root))
        for key, value in EXPERIMENT_TAGS.items():
            if experiment.tags.get(key) != value:  # a store made before
                self._client.set_experiment_tag(experiment.experiment_id, key, value)
        return experiment.experiment_id

    def close_abandoned_runs(self) -> list[str]:
        """Mark KILLED the runs still RUNNING whose owning process on this host is gone; return their ids."""
        running = self.client.search_runs([self.experiment_id()], filter_string=(
            f"attributes.status = 'RUNNING' and tags.`{HOST_TAG}` = '{socket.gethostname()}'"))
        abandoned = [run.info.run_id for run in running if not owner_alive(run.data.tags)]
        for run_id in abandoned:
            self.client.set_terminated(run_id, status="KILLED")
        return abandoned

    def start_pipeline_run(self, name: str, tags: dict[str, str]) -> str:
        """Close the runs abandoned by dead processes of this host, then create the parent run of one pipeline
        invocation, named `name`, and return its id."""
        self.close_abandoned_runs()
        return self.client.create_run(self.experiment_id(), run_name=name,
                                      tags={**tags, "mlflow.runName": name}).info.run_id

    def find_pipeline_run(self, invocation: str) -> str | None:
        found = self.client.search_runs([self.experiment_id()], filter_string=f"tags.`{INVOCATION_TAG}` = "
                                        f"'{invocation}'", max_results=1)
        return found[0].info.run_id if found else None

    def stage_group_run(self, parent: str, stage: str, description: str | None) -> str:
        """The run gathering the jobs of `stage` under the invocation run `parent`: found, or made nested under it
        (named by the stage, owned by the invocation's process, so that it is closed with it). Made where no two
        jobs race to make it: by Snakemake before any job starts, by a DVC job (DVC runs one at a time)."""
        found = self.client.search_runs([self.experiment_id()], filter_string=(
            f"tags.`{PARENT_TAG}` = '{parent}' and tags.`{STAGE_GROUP_TAG}` = '{stage}'"),
            order_by=["attributes.start_time ASC"], max_results=1)
        if found:
            return found[0].info.run_id
        owner = {key: value for key, value in self.client.get_run(parent).data.tags.items() if key in OWNER_TAGS}
        about = {DESCRIPTION_TAG: description} if description else {}
        return self.client.create_run(self.experiment_id(), run_name=stage, tags={
            **owner, **about, STAGE_GROUP_TAG: stage, PARENT_TAG: parent, "mlflow.runName": stage}).info.run_id

    def end_stage_groups(self, parent: str, status: str) -> None:
        """End as `status` the stage runs of the invocation run `parent` still RUNNING, and delete those that no
        job was nested under (Snakemake makes one per stage before it knows which of them will run)."""
        groups = self.client.search_runs([self.experiment_id()], filter_string=f"tags.`{PARENT_TAG}` = '{parent}'")
        for group in groups:
            if STAGE_GROUP_TAG not in group.data.tags:
                continue
            if not self.client.search_runs([self.experiment_id()], max_results=1, filter_string=(
                    f"tags.`{PARENT_TAG}` = '{group.info.run_id}'")):
                self.client.delete_run(group.info.run_id)
            elif group.info.status == "RUNNING":
                self.client.set_terminated(group.info.run_id, status=status)

    def start_run(self, name: str, tags: dict[str, str], parent: str | None, system_metrics: bool) -> str:
        """A run named `name` (nested under `parent`), sampling the machine's use while open with
        `system_metrics`; return its id."""
        nesting = {PARENT_TAG: parent} if parent else {}
        run_id = self.client.create_run(self.experiment_id(), run_name=name,
                                        tags={**tags, **nesting}).info.run_id
        if system_metrics:
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

            logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)  # a line per start and stop
            self.monitors[run_id] = monitor = SystemMetricsMonitor(run_id, tracking_uri=self.uri)
            monitor.start()
        return run_id

    def end_run(self, run_id: str, status: str) -> None:
        if monitor := self.monitors.pop(run_id, None):
            monitor.finish()
        self.client.set_terminated(run_id, status=status)

    def log_metrics(self, run_id: str, values: dict[str, float], step: int | None) -> None:
        self.log_points(run_id, [(key, value, step or 0) for key, value in values.items()])

    def log_points(self, run_id: str, points: list[tuple[str, float, int]]) -> None:
        """Metric values (key, value, step), timestamped now."""
        now = int(time.time() * 1000)
        metrics = [Metric(key, value, now, step) for key, value, step in points]
        for start in range(0, len(metrics), BATCH_METRICS):
            self.client.log_batch(run_id, metrics=metrics[start:start + BATCH_METRICS])

    def log_params(self, run_id: str, values: dict[str, Any]) -> None:
        from mlflow.entities import Param

        self.client.log_batch(run_id, params=[Param(key, str(value)) for key, value in values.items()])

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(run_id, tags=[RunTag(key, str(value)) for key, value in tags.items()])

    def log_artifact(self, run_id: str, path: str, artifact_path: str | None) -> None:
        self.client.log_artifact(run_id, path, artifact_path)

    def log_dataset(self, run_id: str, name: str, sha256: str, source: str, context: str) -> None:
        """A dataset input of the run, by name, digest (the first DATASET_DIGEST_CHARS of its `sha256`) and
        source (a path or URI), for `context` (training, evaluation)."""
        from mlflow.data.dataset_source_registry import resolve_dataset_source
        from mlflow.data.meta_dataset import MetaDataset

        with warnings.catch_warnings():  # a path is a local source for two of MLflow's schemes, both the same class
            warnings.filterwarnings("ignore", "The specified dataset source can be interpreted in multiple ways")
            resolved = resolve_dataset_source(source)
        dataset = MetaDataset(resolved, name=name, digest=sha256[:DATASET_DIGEST_CHARS])
        given = DatasetInput(dataset._to_mlflow_entity(), tags=[InputTag(DATASET_CONTEXT_TAG, context)])
        # MLflow looks the dataset up and inserts it when absent, so two runs logging the same corpus at one moment
        # (two trainings ending together, in two processes) can both find it absent: the second insert breaks the
        # store's uniqueness and fails. Tried again, it finds the winner's row.
        for attempt in range(DATASET_ATTEMPTS):
            try:
                self.client.log_inputs(run_id, datasets=[given])
                return
            except mlflow.exceptions.MlflowException:
                if attempt == DATASET_ATTEMPTS - 1:
                    raise

    def log_model(self, run_id: str, model_file: str, registered_name: str, tags: dict[str, str],
                  pip_requirements: list[str]) -> None:
        """The PyTorch model pickled whole in `model_file`, logged to the run as a `LoopedLanguageModel` with its
        signature and an input example, and registered as a version of `registered_name` tagged with `tags`."""
        import torch

        model = torch.load(model_file, weights_only=False)
        # the model logger and the registry take the process's store, and the logged model its active experiment
        mlflow.set_tracking_uri(self.uri)
        mlflow.set_experiment(experiment_id=self.experiment_id())
        logged = Model.log(None, name="model", flavor=mlflow.pyfunc, python_model=LoopedLanguageModel(model),
                           signature=LoopedLanguageModel.signature(model.config.vocab_size),
                           input_example=(INPUT_EXAMPLE, {"loops": DEFAULT_LOOPS}),
                           pip_requirements=pip_requirements, run_id=run_id)  # pyfunc's log_model takes no run
        mlflow.register_model(logged.model_uri, registered_name, tags=tags)


INPUT_EXAMPLE = np.arange(8, dtype=np.int64)[None]  # one sequence of eight token ids
DEFAULT_LOOPS = 1  # each looped group applied once: the plain forward pass, no depth chosen for the caller


class LoopedLanguageModel(mlflow.pyfunc.PythonModel):
    """A trained looped GPT as MLflow serves it: token ids (batch, sequence) in, next-token logits (batch, sequence,
    vocabulary) out, every looped group applied `loops` times (a parameter of the call; a plain GPT has none to
    apply). Its `model` is the PyTorch module itself."""

    # the signature is given whole (type hints on `predict` could say neither the logits' shape nor the loops
    # parameter), so MLflow's checks from type hints, and its warning asking for them, are left out
    _skip_type_hint_validation = True

    def __init__(self, model):
        self.model = model

    @staticmethod
    def signature(vocab_size: int):
        from mlflow.models import ModelSignature
        from mlflow.types import ParamSchema, ParamSpec, Schema, TensorSpec

        return ModelSignature(inputs=Schema([TensorSpec(np.dtype(np.int64), (-1, -1))]),
                              outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, -1, vocab_size), "logits")]),
                              params=ParamSchema([ParamSpec("loops", "long", DEFAULT_LOOPS)]))

    def predict(self, context, model_input, params: dict | None = None) -> np.ndarray:
        import torch

        loops = int((params or {}).get("loops", DEFAULT_LOOPS))
        ids = torch.as_tensor(np.asarray(model_input), dtype=torch.long)
        self.model.eval()
        with torch.no_grad():
            logits = self.model(ids, [loops] * self.model.n_groups).logits
        return logits.float().numpy()


_LOCAL: dict[tuple[str, Path], Store] = {}
_LOCAL_LOCK = threading.Lock()


def local_store(uri: str, root: Path, server_timeout: float) -> Store:
    """This process's own Store of `uri`, made once."""
    with _LOCAL_LOCK:
        if (uri, root) not in _LOCAL:
            _LOCAL[uri, root] = Store(uri, root, server_timeout)
        return _LOCAL[uri, root]
