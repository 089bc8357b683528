"""A clean copy of the working tree for tests that run the workflow as a user would, and the scripts of scripts/ as
modules for tests that call their functions."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import yaml

from twoscale.config.parameter_files import read_raw

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def load_script(name: str) -> ModuleType:
    """scripts/<name>.py as a module, its neighbours importable while it loads as when it is run (its folder is then
    sys.path[0]), whether or not another test imported them first in this process."""
    folder = str(ROOT / "scripts")
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(folder)
    return module


def environment() -> dict[str, str]:
    """This environment with the virtual environment's tools first and no outside MLflow server."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    env.pop("MLFLOW_TRACKING_URI", None)
    env.pop("TWOSCALE_PARAMS_SNAPSHOT", None)  # what a workflow's spawned jobs read: a test's workflow makes its own
    # pytest's per-test and xdist's per-worker variables left out: the tests' workflows, in whichever worker, share
    # the preloaded interpreters, whose key is the environment
    for name in [name for name in env if name.startswith("PYTEST_")]:
        del env[name]
    return env


def attempt(cmd: list[str], cwd: Path, **variables: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env={**environment(), **variables}, capture_output=True, text=True)


def run(cmd: list[str], cwd: Path, **variables: str) -> str:
    """The command's output; it must succeed. `variables` are set in its environment."""
    result = attempt(cmd, cwd, **variables)
    assert result.returncode == 0, f"{' '.join(cmd)} failed:\n{failure_report(result)}"
    return result.stdout + result.stderr


def failure_report(result: subprocess.CompletedProcess, tail: int = 3000) -> str:
    """The ends of a command's output and, where a job's traceback lies further up (jobs of a workflow print their
    own between the orchestrator's lines), that traceback."""
    report = f"{result.stdout[-tail:]}\n{result.stderr[-tail:]}"
    start = result.stderr.rfind("Traceback (most recent call last)")
    if 0 <= start < len(result.stderr) - tail:
        report += f"\nthe last traceback further up:\n{result.stderr[start:start + tail]}"
    return report


def smoke_params(folder: Path, **sections: dict) -> Path:
    """configs/smoke.yaml with some of its sections updated, as `folder`/params.yaml."""
    raw = read_raw(ROOT / "configs/smoke.yaml")
    for name, changes in sections.items():
        raw[name].update(changes)
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def copy_repository(dest: Path, params: Path) -> Path:
    """The tracked and untracked-but-not-ignored files (and a verified corpus download, if this checkout has
    one) copied to `dest`, with the set `params` holds (an overlay resolved) as params.yaml, committed to a fresh
    git repository. With a set other than params.yaml, dvc.lock is left out: it records the committed run of
    params.yaml, none of whose stages the copy's parameters have run, and DVC rereads and rewrites the whole file
    after every stage it runs (5.0-5.6 s a stage at 118 entries, the committed run's and a smoke run's, against
    2.7-2.8 s at the smoke run's 66)."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    if Path(params).resolve() != (ROOT / "params.yaml").resolve():
        files.remove("dvc.lock")
    for name in files:
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    if (ROOT / "data/cache").is_dir():
        shutil.copytree(ROOT / "data/cache", dest / "data/cache")
    (dest / "params.yaml").write_text(yaml.safe_dump(read_raw(params), sort_keys=False))  # an overlay, resolved
    run(["git", "init", "-q"], dest)
    run(["git", "add", "-A"], dest)
    run(["git", "-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "-qm", "copy"], dest)
    return dest


def stages_writing_only(*suffixes: str) -> list[str]:
    """The declared stages every output of which ends with one of `suffixes` (".png": those drawing figures)."""
    from twoscale.pipeline.declaration import dependencies

    return [name for name, entry in dependencies.declaration().items()
            if all(path.endswith(suffixes) for path in dependencies.output_paths(entry))]


def figure_stages() -> list[str]:
    """The declared stages that draw figures and nothing else."""
    return stages_writing_only(".png")


def figure_logs(run_root: Path) -> list[Path]:
    """The logs of a run's figure jobs (logs/<stage module>..., a module named *_figures)."""
    logs = run_root / "logs"
    return sorted(log for log in logs.rglob("*.log")
                  if log.relative_to(logs).parts[0].removesuffix(".log").endswith("_figures"))
