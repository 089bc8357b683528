"""A parameter set's model stages as a kit for a GPU node whose Python has PyTorch but not the workflow's tools (no
Snakemake, no polars): made here, run there by scripts/gpu_call.sh, finished here from what comes back
(docs/running.md#a-gpu-node-without-the-workflows-tools).

    python scripts/gpu_kit.py build --params configs/gpu-depth.yaml     # here: data, commands, packages -> .gpukit/
    OUT=<folder> bash scripts/gpu_call.sh                                # there, in a copy of the checkout
    python scripts/gpu_kit.py finish --results <folder>/results.tgz     # here: the stages that need no model

`build` makes the set's corpus and tokens with Snakemake here, takes every job's command from Snakemake's plan (its
dry run, in the order it plans them) and splits them: the stages that load a model (stages.yaml's `gpu`) go to
.gpukit/commands.txt, in the order the node runs them, what scores a claim before what only explains one (the stages
the study runs for runtime.explain_seeds alone), so that a call cut short loses the latter; the other stages go to
.gpukit/finish.txt. The node runs the jobs between two `wait` lines side by side (the GPU has room for several): a
timed job or a training, whose throughput is read, runs alone, and a job that reads another's outputs after it. The
CUDA-graph decoding's check against the engine (the CUDA cases of tests/decoding/test_graphed.py) is a job too, in
the first batch that shares the node, so that its minute of compilation costs the node no time of its own. It
copies the parameter files the commands name into .gpukit/params/ and, unless --no-packages, the Python packages
such a node lacks (polars and pydantic, at the versions installed here, as CPython wheels for x86-64 Linux) unpacked
into .gpukit/site.tar.xz. It ends by printing what must travel to the node: the checkout, .gpukit/ and the token
arrays.

`finish` unpacks the tables and logs that came back into the set's folder (runs/<name>/) and runs finish.txt's
commands here: figures, geometry, trade-off, headline and claims. Exit status 1 when a command failed (each is run
and reported), 2 on bad input.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from twoscale.config.parameter_files import results_root
from twoscale.pipeline.declaration.dependencies import declared_stages, output_paths, same_or_inside
from twoscale.pipeline.orchestrators import SNAPSHOTS

KIT = Path(".gpukit")
RULE = re.compile(r"^(?:local)?rule (\w+):$")  # a job's first line in Snakemake's plan: its rule, the stage's name
SHELL_COMMAND = "Shell command: "
PRELOADED = "python -m twoscale.pipeline.preload "  # how every rule runs its stage
PARAMS_FILE = re.compile(re.escape(SNAPSHOTS.as_posix()) + r"/\w+\.yaml")
DATA_STAGES = ("corpus", "tokenize")  # made here: the node may reach no network, and they need no model
TRAINING = ("train", "train_teacher")  # not declared timed, but their throughput (MFU) is read, so alone on the node
BARRIER = "wait"  # a line of commands.txt: the node waits for every job started before it
EXPLAINED_ONLY = "${runtime.explain_seeds}"  # the seeds of a stage that explains a verdict and scores none
CHECK = ("check", 'timeout 150 "$PYTHON" -m pytest -q -p no:cacheprovider tests/decoding/test_graphed.py -k cuda '
                  '> "$OUT/cuda_check.txt" 2>&1')  # the graphs against the engine on the tests' tiny float64 models
NODE_PACKAGES = ("polars", "polars-runtime-32", "pydantic", "pydantic-core", "typing-inspection", "annotated-types",
                 "typing-extensions")  # what PyTorch's usual stack lacks of what the stages import
NODE_PYTHON = "3.12"
WHEEL_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


class KitError(Exception):
    pass


def planned_jobs(dry_run: str) -> list[tuple[str, str]]:
    """Every job's (stage, command) in the order Snakemake's dry run (`-n -p`) lists them, which runs each after its
    inputs. The stage is the job's rule: its command names the stage's module, which some stages share
    (train_teacher runs train's, distill_curve distill's)."""
    jobs, rule = [], None
    for line in dry_run.splitlines():
        if found := RULE.match(line):
            rule = found.group(1)
        elif line.startswith(SHELL_COMMAND) and (command := line[len(SHELL_COMMAND):].strip()) != "None":
            jobs.append((rule, command))  # "None": a rule with no command (all)
    return jobs


def reads(reader: dict, writer: dict) -> bool:
    """Whether a declared stage reads what another writes: an input that is one of its outputs, or a folder holding
    one."""
    return any(same_or_inside(written, path) for path in reader["inputs"] for written in output_paths(writer))


def deferred(names: set[str], stages: dict[str, dict]) -> set[str]:
    """The stages among `names` that may run after all the others: those that only explain a verdict (the study runs
    them for runtime.explain_seeds alone) and that no other of `names` reads (surrogates reads distill_curve's)."""
    later = {name for name in names if stages[name].get("matrix", {}).get("seed") == EXPLAINED_ONLY}
    while needed := {name for name in later for other in names - later if reads(stages[other], stages[name])}:
        later -= needed
    return later


def node_order(jobs: list[tuple[str, str]], stages: dict[str, dict]
               ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(the model stages' jobs in the node's order, the other stages' in the plan's), the data stages left out: the
    plan's order, which runs each after its inputs, with the deferred stages moved last."""
    kept = [job for job in jobs if job[0] not in DATA_STAGES]
    on_node = [job for job in kept if stages[job[0]].get("gpu")]
    later = deferred({stage for stage, _ in on_node}, stages)
    return sorted(on_node, key=lambda job: job[0] in later), [job for job in kept if job not in on_node]


def as_kit_command(command: str) -> str:
    """The command as the kit runs it: `$PYTHON -m twoscale <module>` (no preloading server, which would need the
    workflow's tools) and the parameter file's copy in the kit."""
    if not command.startswith(PRELOADED):
        raise KitError(f"not a stage's command: {command[:80]}")
    return PARAMS_FILE.sub(lambda m: (KIT / "params" / Path(m.group(0)).name).as_posix(),
                           '"$PYTHON" -m twoscale ' + command[len(PRELOADED):])


def runs_alone(stage: str, stages: dict[str, dict]) -> bool:
    """A training or a timed stage: its throughput is read, so nothing shares the node with it."""
    return stage in TRAINING or bool(stages[stage].get("timed"))


def side_by_side(jobs: list[tuple[str, str]], stages: dict[str, dict]) -> list[list[tuple[str, str]]]:
    """The jobs, in their order, as batches whose jobs may run at once: a job joins the batch before it unless it or
    a job of that batch runs alone (`runs_alone`), or it reads the outputs of a stage of that batch."""
    batches: list[list[tuple[str, str]]] = []
    for stage, command in jobs:
        last = batches[-1] if batches else []
        if last and not runs_alone(stage, stages) and not any(
                runs_alone(other, stages) or reads(stages[stage], stages[other]) for other, _ in last):
            last.append((stage, command))
        else:
            batches.append([(stage, command)])
    return batches


def with_check(batches: list[list[tuple[str, str]]], stages: dict[str, dict]) -> list[list[tuple[str, str]]]:
    """The batches with the check (`CHECK`) in the first whose jobs share the node, if one comes before the first
    that runs alone and is no training (a timed job, which decodes from the graphs it checks); else in a batch of its
    own before that job, or last."""
    def alone(batch: list[tuple[str, str]]) -> bool:
        return any(runs_alone(stage, stages) for stage, _ in batch)

    first_timed = next((index for index, batch in enumerate(batches)
                        if alone(batch) and not any(stage in TRAINING for stage, _ in batch)), len(batches))
    shared = next((index for index, batch in enumerate(batches[:first_timed]) if not alone(batch)), None)
    if shared is None:
        return [*batches[:first_timed], [CHECK], *batches[first_timed:]]
    return [*batches[:shared], [*batches[shared], CHECK], *batches[shared + 1:]]


def kit_lines(batches: list[list[tuple[str, str]]]) -> str:
    """A kit's list of jobs: a line each, its stage and command apart by a tab, and a `wait` line between batches."""
    return f"{BARRIER}\n".join("".join(f"{stage}\t{command}\n" for stage, command in batch) for batch in batches)


def as_kit_jobs(jobs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(stage, as_kit_command(command)) for stage, command in jobs]


def snakemake(params: Path, *options: str) -> subprocess.CompletedProcess:
    """Snakemake of this environment, whose rules call `python` and so find this environment's first on the path."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.run([sys.executable, "-m", "snakemake", "--cores", "all", "--configfile", str(params), *options],
                          capture_output=True, text=True, env={**os.environ, "PATH": path})


def node_packages(kit: Path, names: tuple[str, ...], python: str) -> dict[str, str]:
    """The packages' wheels for the node's Python, unpacked into one kit/site.tar.xz (made again only when the
    versions changed); returns the versions."""
    versions = {name: importlib.metadata.version(name) for name in names}
    manifest = kit / "site.json"
    if (kit / "site.tar.xz").exists() and manifest.exists() and json.loads(manifest.read_text()) == versions:
        return versions
    with tempfile.TemporaryDirectory() as scratch:
        wheels, site = Path(scratch, "wheels"), Path(scratch, "site")
        platforms = [option for platform in WHEEL_PLATFORMS for option in ("--platform", platform)]
        fetched = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                                  "--python-version", python, "--implementation", "cp", *platforms, "-d", str(wheels),
                                  *(f"{name}=={version}" for name, version in versions.items())],
                                 capture_output=True, text=True)
        if fetched.returncode != 0:
            raise KitError(f"pip download failed: {fetched.stderr.strip().splitlines()[-1]}")
        for wheel in sorted(wheels.glob("*.whl")):
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(site)
        with tarfile.open(kit / "site.tar.xz.tmp", "w:xz", preset=6) as archive:
            archive.add(site, arcname=".")
    (kit / "site.tar.xz.tmp").replace(kit / "site.tar.xz")
    manifest.write_text(json.dumps(versions, indent=1) + "\n")
    return versions


def size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def build(params: Path, kit: Path, packages: bool, dry_run: bool) -> None:
    root = results_root(params)
    if not dry_run:
        made = snakemake(params, "--until", DATA_STAGES[-1])  # with what it needs; naming both rules left Snakemake
        # 9.27 "out of jobs ready to be started" once the first had run (its issue 823)
        if made.returncode != 0:
            raise KitError(f"the data stages failed:\n{made.stderr[-2000:]}")
    planned = snakemake(params, "-n", "-p", "--forceall", "--quiet", "progress")
    if planned.returncode != 0:
        raise KitError(f"snakemake's plan failed:\n{planned.stderr[-2000:]}")
    stages = declared_stages()
    on_node, here = node_order(planned_jobs(planned.stdout + planned.stderr), stages)
    if not on_node:
        raise KitError(f"{params}: no stage of this set loads a model")
    print(f"{len(on_node)} commands for the node ({', '.join(sorted({stage for stage, _ in on_node}))}), "
          f"{len(here)} to finish here")
    if dry_run:
        return
    shutil.rmtree(kit / "params", ignore_errors=True)
    (kit / "params").mkdir(parents=True)
    for name in sorted({m.group(0) for _, c in on_node + here for m in PARAMS_FILE.finditer(c)}):
        shutil.copy2(name, kit / "params")
    batches = [as_kit_jobs(batch) for batch in side_by_side(on_node, stages)]
    (kit / "commands.txt").write_text(kit_lines(with_check(batches, stages)))
    (kit / "finish.txt").write_text(kit_lines([as_kit_jobs(here)]))
    (kit / "root").write_text(root.as_posix() + "\n")
    versions = node_packages(kit, NODE_PACKAGES, NODE_PYTHON) if packages else {}
    data = root / "data" / "prepared"
    print(f"{kit}/ made; packages: {', '.join(f'{n} {v}' for n, v in versions.items()) or 'none'}")
    tracked = [Path(name) for name in subprocess.run(["git", "ls-files", "-z"], capture_output=True, text=True,
                                                     check=True).stdout.split("\0") if name and Path(name).is_file()]
    results = sum(size(path) for path in tracked if path.parts[0] == "results")
    print(f"to copy to the node: the checkout's files ({sum(map(size, tracked)) / 2**20:.1f} MiB, of which results/ "
          f"{results / 2**20:.1f} MiB, which the node does not read), {kit} ({size(kit) / 2**20:.1f} MiB) and {data} "
          f"({size(data) / 2**20:.1f} MiB)")
    print("on the node, in the checkout's root: OUT=<folder> bash scripts/gpu_call.sh")


def finish(results: Path, kit: Path) -> int:
    root = Path((kit / "root").read_text().strip())
    with tarfile.open(results) as archive:
        archive.extractall(root, filter="data")
    failed = 0
    for line in (kit / "finish.txt").read_text().splitlines():
        stage, command = line.split("\t", 1)
        ran = subprocess.run(command, shell=True, env={**os.environ, "PYTHON": sys.executable})
        print(f"{'failed' if ran.returncode else 'done'}: {stage}", flush=True)
        failed += ran.returncode != 0
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    made = verbs.add_parser("build", help="make the kit of a parameter set")
    made.add_argument("--params", type=Path, required=True, help="the parameter set, configs/<name>.yaml")
    made.add_argument("--no-packages", action="store_true", help="carry no Python packages (the node has them)")
    made.add_argument("--dry-run", action="store_true", help="say what the kit would hold; make nothing")
    done = verbs.add_parser("finish", help="unpack what came back and run the stages that need no model")
    done.add_argument("--results", type=Path, required=True, help="results.tgz from scripts/gpu_call.sh")
    args = parser.parse_args(argv)
    try:
        if args.verb == "build":
            if not args.params.is_file():
                raise KitError(f"{args.params}: no such parameter file")
            build(args.params, KIT, not args.no_packages, args.dry_run)
            return 0
        if not (KIT / "finish.txt").is_file() or not args.results.is_file():
            raise KitError(f"{KIT}/finish.txt or {args.results}: not found (build the kit first)")
        return finish(args.results, KIT)
    except KitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
