"""Compare the outputs of two runs of one parameter set, for a change meant to leave every output as it was.

    python scripts/compare_runs.py BEFORE AFTER

BEFORE and AFTER are run folders (`runs/smoke` of two checkouts, one at each commit). Every file under their data/
and results/ is compared, but logs, Snakemake's benchmark files and the hash caches beside the build records. A file
is one of:
- the same byte for byte;
- different in clock readings only: table columns or JSON keys that time something (CLOCK), or rows chosen by
  one (CHOSEN_BY_CLOCK: the sampler's fastest setting);
- following its inputs: it or an input its build record names differs, each such input in clock readings or
  following its own inputs (a record then differs in those inputs' hashes, and its output's). Whether the change
  left it alone is decided by running its stage at AFTER from BEFORE's inputs: the command is printed;
- different otherwise (a figure or checkpoint that differs at all, with no input that explains it).
Exit status 0 when every file is the same or differs in clock readings only, 1 otherwise. docs/development.md says
when to use it.
"""

from __future__ import annotations

import argparse
import csv
import json
import posixpath
import sys
from pathlib import Path

import polars as pl

from twoscale.pipeline.records.provenance import RECORDS, record_path

CLOCK = frozenset({
    "seconds", "tokens_per_s", "model_tflops_per_s", "peak_tflops", "mfu", "mfu_datasheet",  # training
    "ms_per_token", "ms_per_token_q1", "ms_per_token_q3", "speedup", "speedup_low", "speedup_high",  # latency
})
# outputs whose rows are chosen by a clock reading: which sampler setting is the fastest of equal quality (by its
# measured tokens/s); any column may differ where the speed does
CHOSEN_BY_CLOCK = {"speed.csv": "tokens_per_s"}
LEFT_OUT = ("logs/", "results/benchmarks/")


def outputs(run: Path) -> set[str]:
    return {path.relative_to(run).as_posix() for folder in ("data", "results") if (run / folder).is_dir()
            for path in (run / folder).rglob("*")
            if path.is_file() and path.suffix != ".stat" and not path.name.startswith(".")  # a write under way
            and not path.relative_to(run).as_posix().startswith(LEFT_OUT)}


def flat(value, prefix: str = "") -> dict[str, str]:
    """A JSON document as `key.key: value` pairs (a list's items by index), each value as JSON text."""
    if isinstance(value, dict):
        return {name: text for key, item in value.items() for name, text in flat(item, f"{prefix}{key}.").items()}
    if isinstance(value, list):
        return {name: text for index, item in enumerate(value)
                for name, text in flat(item, f"{prefix}{index}.").items()}
    return {prefix.removesuffix("."): json.dumps(value)}


def columns(path: Path) -> dict[str, str]:
    """A table's columns, each as the JSON text of its values; a JSON file's keys likewise."""
    if path.suffix == ".parquet":
        frame = pl.read_parquet(path)
        return {name: json.dumps(frame[name].to_list(), default=str) for name in frame.columns}
    if path.suffix == ".csv":
        rows = list(csv.reader(path.open()))
        return {name: json.dumps([row[index] for row in rows[1:]]) for index, name in enumerate(rows[0])}
    return flat(json.loads(path.read_text()))


def differing(before: Path, after: Path) -> set[str]:
    """The columns or keys in which two tables or JSON files differ (a column in one only counts)."""
    old, new = columns(before), columns(after)
    return {name for name in old.keys() | new.keys() if old.get(name) != new.get(name)}


def last_name(key: str) -> str:
    """A flattened key's own name, list indices aside: history.3.seconds -> seconds."""
    return next(part for part in reversed(key.split(".")) if not part.isdigit())


def output_of(record: str) -> str:
    """The output a build record describes (`provenance.record_path` the other way)."""
    return record.replace(f"/{RECORDS}/", "/").removesuffix(".json")


def inputs_of(run: Path, name: str) -> set[str]:
    """The files, under the run folder, that the build record of output `name` says it was built from."""
    record = run / record_path(Path(name))
    if not record.is_file():
        return set()
    folder = posixpath.dirname(name)
    return {posixpath.normpath(posixpath.join(folder, path)) for path in json.loads(record.read_text())["inputs"]}


def compare(before_run: Path, after_run: Path) -> dict[str, dict[str, str]]:
    """Each file's kind (same, clock, follows, otherwise) and what differs in it."""
    before_files, after_files = outputs(before_run), outputs(after_run)
    kinds: dict[str, dict[str, str]] = {"same": {}, "clock": {}, "follows": {}, "otherwise": {}}
    for name in sorted(before_files ^ after_files):
        kinds["otherwise"][name] = "only in " + ("BEFORE" if name in before_files else "AFTER")
    unexplained = {}
    for name in sorted(before_files & after_files):
        before, after = before_run / name, after_run / name
        if before.read_bytes() == after.read_bytes():
            kinds["same"][name] = ""
        elif before.suffix in (".parquet", ".csv", ".json"):
            keys = differing(before, after)
            chosen_by = CHOSEN_BY_CLOCK.get(before.name)
            if {last_name(key) for key in keys} <= CLOCK:
                kinds["clock"][name] = ", ".join(sorted({last_name(key) for key in keys}))
            elif chosen_by in keys:
                kinds["clock"][name] = f"rows chosen by {chosen_by}: " + ", ".join(sorted(keys))
            else:
                unexplained[name] = sorted(keys)
        else:
            unexplained[name] = ["bytes"]
    changed = True
    while changed:  # an explained difference explains those built from it, in the order they were built
        changed = False
        explained = kinds["clock"].keys() | kinds["follows"].keys()
        for name, keys in list(unexplained.items()):
            kind = None
            if f"/{RECORDS}/" in name:  # a record: its output's hash and size, its inputs' hashes, its digest
                output = output_of(name)
                input_keys = [key for key in keys if key.startswith("inputs.")]
                inputs = {posixpath.normpath(posixpath.join(posixpath.dirname(output), key.removeprefix("inputs.")))
                          for key in input_keys}
                own = set(keys) - set(input_keys) - {"digest"}
                if own <= {"sha256", "size"} and inputs <= explained and (not own or output in explained):
                    kind = "follows" if output in kinds["follows"] else "clock"
            elif inputs_of(before_run, name) & explained:
                kind = "follows"
            if kind:
                kinds[kind][name] = "its inputs' hashes" if kind == "clock" else ", ".join(keys[:8]) + (
                    " ..." if len(keys) > 8 else "")
                del unexplained[name]
                changed = True
    for name, keys in unexplained.items():
        kinds["otherwise"][name] = ", ".join(keys[:8]) + (" ..." if len(keys) > 8 else "")
    return kinds


def stages_of(run: Path, names: list[str]) -> list[str]:
    """The stages that built these outputs, by their build records (a record's own stage for a record)."""
    found = set()
    for name in names:
        output = output_of(name) if f"/{RECORDS}/" in name else name
        record = run / record_path(Path(output))
        if record.is_file():
            found.add(json.loads(record.read_text())["stage"])
    return sorted(found)


def report(kinds: dict[str, dict[str, str]]) -> str:
    """How many files are of each kind, then each file that is not the same and what differs in it (a record that
    differs in hashes alone counted, not listed)."""
    lines = [f"{len(kinds['same'])} files the same byte for byte, {len(kinds['clock'])} different in clock readings "
             f"only, {len(kinds['follows'])} following inputs that differ, {len(kinds['otherwise'])} different "
             "otherwise"]
    lines += [f"  {kind:9} {name}: {what}" for kind in ("clock", "follows", "otherwise")
              for name, what in kinds[kind].items() if not (kind == "clock" and f"/{RECORDS}/" in name)]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path, help="the run folder before the change")
    parser.add_argument("after", type=Path, help="the run folder after it")
    args = parser.parse_args(argv)
    for run in (args.before, args.after):
        if not run.is_dir():
            print(f"error: {run}: no such run folder", file=sys.stderr)
            return 2
    kinds = compare(args.before, args.after)
    print(report(kinds))
    if kinds["follows"]:
        rules = " ".join(stages_of(args.before, list(kinds["follows"])))
        print("to decide those following their inputs (scripts/compare_commits.py does it for two commits), run their "
              "stages at AFTER from BEFORE's outputs, then compare again: copy BEFORE over AFTER's run folder, and "
              f"there run snakemake --cores all --configfile <set> --forcerun {rules} --allowed-rules {rules}")
    return 0 if not kinds["follows"] and not kinds["otherwise"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
