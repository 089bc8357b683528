"""A claims bundle read against another (twoscale.claims.comparison, the claims stage's opening section, the
`compare` and `readme` commands), on bundles built by hand whose every placement is known."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from twoscale.claims import comparison
from twoscale.config.errors import TwoscaleError
from twoscale.stages.claims import read_against
from twoscale.tools import readme


def spread(*values: float) -> dict:
    return {"mean": sum(values) / len(values), "min": min(values), "max": max(values), "n": len(values),
            "seeds": len(values)}


def entry(verdicts: list[str], **headline: tuple[float, ...]) -> dict:
    verdict = verdicts[0] if len(set(verdicts)) == 1 else "split"
    return {"seeds": list(range(len(verdicts))), "verdict": verdict, "verdicts": verdicts,
            "headline": {label: spread(*values) for label, values in headline.items()}}


STUDY = [{"claim": "C1", "statement": "", "test": "", "recipes": {
              "paper": entry(["mixed", "not reproduced", "not reproduced"], gain=(0.1, 0.2, 0.3)),
              "huginn": entry(["reproduced"] * 3, gain=(0.05, 0.06, 0.07), ratio=(1.0, 1.0, 1.0))}},
         {"claim": "C6", "statement": "", "test": "", "recipes": {
              "paper": entry(["fails", "fails", "fails"], speed=(0.5, 0.6, 0.7))}}]
RUN = [{"claim": "C1", "statement": "", "test": "", "recipes": {
            "paper": entry(["not reproduced"], gain=(0.45,)),  # 0.15 above 0.1-0.3: 0.75 widths
            "huginn": entry(["mixed"], gain=(0.06,), ratio=(0.9,)),  # inside; 0.1 below a range of no width
            "sandwich": entry(["reproduced"], gain=(0.2,))}},  # a recipe the study lacks: left out
       {"claim": "C8", "statement": "", "test": "", "recipes": {"paper": entry(["holds"], x=(1.0,))}}]


def origins(machine: str, precision: str = "bfloat16") -> list[dict]:
    return [{"recipe": "paper", "seed": 1337, "computation": "training", "precision": precision, "machine": machine,
             "torch": "2.13.0+cpu"},
            {"recipe": "paper", "seed": 1337, "computation": "loop geometry", "precision": "float64",
             "machine": machine, "torch": "2.13.0+cpu"}]


def test_placement_against_a_range_by_hand():
    assert comparison.placement(0.2, 0.1, 0.3) == "inside"
    assert comparison.placement(0.1, 0.1, 0.3) == "inside"  # its ends belong to it
    assert comparison.placement(0.45, 0.1, 0.3) == "0.15 above, 0.8 widths"  # 0.15 / 0.2 = 0.75
    assert comparison.placement(0.0, 0.1, 0.3) == "0.1 below, 0.5 widths"
    assert comparison.placement(0.9, 1.0, 1.0) == "0.1 below"  # a range of no width: no widths
    assert comparison.placement(None, 0.1, 0.3) == "n/a"


def test_each_verdict_and_number_beside_the_reference_s_seeds():
    rows = comparison.compare(RUN, STUDY)
    assert [(row["claim"], row["recipe"]) for row in rows] == [("C1", "paper"), ("C1", "huginn")]
    paper, huginn = rows
    assert (paper["verdict"], paper["agreeing"], paper["reference_seeds"]) == ("not reproduced",
                                                                              {"not reproduced": 2}, 3)
    assert (huginn["verdict"], huginn["agreeing"]) == ("mixed", {"mixed": 0})
    assert [(n["label"], n["placement"]) for n in huginn["numbers"]] == [("gain", "inside"), ("ratio", "0.1 below")]
    assert comparison.counts(rows) == {"verdicts": 2, "verdicts_shared": 1, "numbers": 3, "numbers_inside": 1}
    lines = comparison.to_markdown(rows, comparison.computed_by(origins("Intel Xeon")),
                                   comparison.computed_by(origins("AMD EPYC")), "the study")
    assert lines[0].startswith("This run: Intel Xeon, torch 2.13.0+cpu, training in bfloat16. The study: AMD EPYC")
    assert lines[2].startswith("1 of 2 verdicts were given by some seed of the study (")
    assert "); 1 of 3 headline numbers" in lines[2]
    assert "| C1 | paper | not reproduced | 2/3 | split | gain 0.45 (0.1–0.3; 0.15 above, 0.8 widths) |" in lines


def test_a_run_whose_own_seeds_split_counts_each_of_its_verdicts():
    """A study read against a study: a split is shared when the reference's seeds gave each of its verdicts."""
    run = [{"claim": "C1", "statement": "", "test": "", "recipes": {
        "paper": entry(["not reproduced", "mixed", "not reproduced"], gain=(0.2, 0.25, 0.3)),
        "huginn": entry(["reproduced", "mixed", "reproduced"], gain=(0.06, 0.06, 0.06))}}]
    rows = comparison.compare(run, STUDY)
    assert [row["agreeing"] for row in rows] == [{"not reproduced": 2, "mixed": 1}, {"reproduced": 3, "mixed": 0}]
    assert comparison.counts(rows)["verdicts_shared"] == 1
    lines = comparison.to_markdown(rows, set(), set(), "the study")
    assert "| C1 | paper | split | not reproduced 2/3, mixed 1/3 | split |" in "\n".join(lines)


def test_the_parameters_key_ignores_the_seeds_and_nothing_else():
    raw = {"runtime": {"seeds": [1337], "explain_seeds": [1337], "threads": 1}, "train": {"steps": 600}}
    key = comparison.parameters_key(raw)
    assert comparison.parameters_key({**raw, "runtime": {**raw["runtime"], "seeds": [1337, 7, 42]}}) == key
    assert comparison.parameters_key({**raw, "train": {"steps": 601}}) != key
    assert comparison.parameters_key({**raw, "runtime": {**raw["runtime"], "threads": 2}}) != key


def write_bundle(path: Path, summary: list, machine: str, parameters: str | None = "k", **more) -> Path:
    path.write_text(json.dumps({"summary": summary, "runs": [], "origins": origins(machine),
                                **({"parameters": parameters} if parameters else {}), **more}))
    return path


def test_the_claims_stage_reads_a_run_against_the_study_only_of_its_parameters_computed_otherwise(tmp_path):
    study = write_bundle(tmp_path / "claims.json", STUDY, "AMD EPYC")
    opening, entry_ = read_against(study, "k", RUN, origins("Intel Xeon"))
    assert opening[0] == "## Another draw of the committed study"
    assert entry_["verdicts_shared"] == 1 and entry_["reference"] == study.as_posix() and len(entry_["rows"]) == 2
    assert read_against(study, "k", RUN, origins("AMD EPYC")) is None  # computed alike: the study's own draw
    assert read_against(study, "other", RUN, origins("Intel Xeon")) is None  # another experiment
    assert read_against(tmp_path / "absent.json", "k", RUN, origins("Intel Xeon")) is None
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(TwoscaleError, match="broken.json: not a claims.json of the claims stage"):
        read_against(tmp_path / "broken.json", "k", RUN, origins("Intel Xeon"))


def test_the_compare_command_prints_the_comparison_of_any_two_bundles(tmp_path):
    run = write_bundle(tmp_path / "run.json", RUN, "Intel Xeon", parameters="k")
    study = write_bundle(tmp_path / "study.json", STUDY, "AMD EPYC", parameters="j")
    done = subprocess.run([sys.executable, "-m", "twoscale", "compare", str(run), str(study)], capture_output=True,
                          text=True, check=True)
    assert done.stdout.startswith("parameters: other: another experiment; numbers computed otherwise")
    assert "| C1 | huginn | mixed | 0/3 | reproduced |" in done.stdout
    missing = subprocess.run([sys.executable, "-m", "twoscale", "compare", str(run), str(tmp_path / "none.json")],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and missing.stderr.strip().endswith("none.json: not found")


def test_readme_leaves_the_table_of_a_run_read_against_the_study_as_it_is(tmp_path):
    table_of = {"results/claims.json": "| committed table |"}
    text = f"intro\n{readme.VERDICTS_MARK}results/claims.json -->\n{table_of['results/claims.json']}\n\nafter\n"
    (tmp_path / "README.md").write_text(text)
    (tmp_path / "results").mkdir()
    write_bundle(tmp_path / "results/claims.json", RUN, "Intel Xeon", compared_with={"verdicts": 2})
    readme.run(type("Args", (), {"readme": tmp_path / "README.md"})())
    assert (tmp_path / "README.md").read_text() == text
    write_bundle(tmp_path / "results/claims.json", RUN, "Intel Xeon")  # the committed run's own: rewritten
    readme.run(type("Args", (), {"readme": tmp_path / "README.md"})())
    assert "| committed table |" not in (tmp_path / "README.md").read_text()


def test_a_bundle_older_than_its_origins_reads_as_computed_by_nothing_known(tmp_path):
    """A claims.json written before the claims recorded what computed them (the Zen 5 study's) still reads."""
    path = tmp_path / "claims.json"
    path.write_text(json.dumps({"summary": STUDY, "runs": []}))
    assert comparison.read_claims(path)["origins"] == []
    assert comparison.computed_by(comparison.read_claims(path)["origins"]) == set()
