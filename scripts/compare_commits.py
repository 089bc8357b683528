"""Run the smoke set at two commits on this machine and list every output that differs beyond the clock readings:
the guard of a change to the plumbing, which is no stage's source (docs/development.md#a-change-to-the-plumbing).

    python scripts/compare_commits.py OLD [NEW]      # NEW: HEAD by default

Each commit is checked out in a git worktree of its own under a temporary folder and runs `snakemake --cores all
--configfile configs/smoke.yaml` with its own sources (PYTHONPATH) and this environment's libraries, tracking off.
The two runs are compared file by file (scripts/compare_runs.py). Files that differ only because an input differs in
clock readings (the claims, the gathered sweep tables, the trade-off figures) are then decided by running their
stages at NEW from OLD's outputs (OLD's run copied into NEW's worktree, `--forcerun` and `--allowed-rules` those
stages) and comparing again. Exit status 0 when every file is the same or differs in clock readings only, 1 when
some file differs otherwise (listed), 2 on a bad commit or a run that failed. `--keep DIR` runs in DIR and leaves the
worktrees there.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from compare_runs import compare, report, stages_of

SMOKE = ("--configfile", "configs/smoke.yaml")
RUN = Path("runs/smoke")  # where the smoke set writes in a checkout


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def checkout(repository: Path, commit: str, folder: Path) -> Path:
    """A worktree of `repository` at `commit` in `folder`, with this checkout's downloaded corpus if it has one."""
    subprocess.run(["git", "worktree", "add", "--detach", str(folder), commit], cwd=repository, check=True,
                   capture_output=True, text=True)
    if (repository / "data/cache").is_dir():
        shutil.copytree(repository / "data/cache", folder / "data/cache")
    return folder


def smoke(worktree: Path, *options: str) -> None:
    """The smoke set run in `worktree` with its own sources; SystemExit(2) naming the commit if it fails."""
    environment = {**os.environ, "PYTHONPATH": str(worktree / "src"), "TWOSCALE_TRACKING": "off",
                   "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["snakemake", "--cores", "all", *SMOKE, *options], cwd=worktree, env=environment,
                          capture_output=True, text=True)
    if done.returncode:
        print(done.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"error: the smoke set failed at {git('rev-parse', '--short', 'HEAD', cwd=worktree)} "
                         f"({worktree})")


def decide_followers(before: Path, after: Path, follows: list[str]) -> None:
    """Rerun at AFTER, from BEFORE's outputs, the stages that built the files following their inputs."""
    rules = stages_of(before / RUN, follows)
    shutil.rmtree(after / RUN)
    shutil.copytree(before / RUN, after / RUN, symlinks=True)
    smoke(after, "--forcerun", *rules, "--allowed-rules", *rules)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", help="the commit before the change")
    parser.add_argument("new", nargs="?", default="HEAD", help="the commit with the change (default: HEAD)")
    parser.add_argument("--keep", type=Path, help="run in this (new or empty) folder and leave the worktrees there")
    args = parser.parse_args(argv)
    repository = Path(git("rev-parse", "--show-toplevel", cwd=Path.cwd()))
    try:
        commits = [git("rev-parse", "--verify", f"{name}^{{commit}}", cwd=repository) for name in (args.old, args.new)]
    except subprocess.CalledProcessError:
        print(f"error: {args.old} or {args.new} is not a commit of {repository}", file=sys.stderr)
        return 2
    work = args.keep or Path(tempfile.mkdtemp(prefix="twoscale-compare-"))
    work.mkdir(parents=True, exist_ok=True)
    worktrees = []
    try:
        for name, commit in zip(("before", "after"), commits):
            worktrees.append(checkout(repository, commit, work / name))
            print(f"{name}: {commit[:12]}: the smoke set ...", flush=True)
            smoke(worktrees[-1])
        before, after = worktrees
        kinds = compare(before / RUN, after / RUN)
        print("as run:", report(kinds))
        if kinds["follows"]:
            print(f"rerunning {', '.join(stages_of(before / RUN, list(kinds['follows'])))} at the after commit "
                  "from the before run's outputs ...", flush=True)
            decide_followers(before, after, list(kinds["follows"]))
            kinds = compare(before / RUN, after / RUN)
            print("from the same inputs:", report(kinds))
        return 0 if not kinds["follows"] and not kinds["otherwise"] else 1
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    finally:
        if args.keep is None:
            for worktree in worktrees:
                subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=repository,
                               capture_output=True)
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
