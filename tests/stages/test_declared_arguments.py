"""A stage's command line is derived from its command in stages.yaml: the options both orchestrators pass are the
options the stage takes, each described by what the declaration puts there."""

from __future__ import annotations

import pytest

from twoscale.__main__ import build_parser
from twoscale.pipeline.declaration.dependencies import STAGES, command_options, declaration, stage_module


def declared_command(stage: str) -> list[str]:
    """The stage's command as stages.yaml declares it, from its module's name on, a job's numbers filled in (the
    other placeholders left as written)."""
    words = declaration()[stage]["cmd"].split()
    numbers = {"${item.seed}": "1337", "${item.blocks}": "2"}
    return [numbers.get(word, word) for word in words[words.index("twoscale.pipeline.preload") + 1:]]


def options_of(parser_for_stage) -> dict[str, object]:
    [sub] = [action for action in parser_for_stage._actions if action.dest == "stage"]
    return sub.choices


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_the_declared_command_is_the_stage_s_command_line(stage):
    module = stage_module(stage)
    parser = options_of(build_parser(module))[module]
    taken = {option: action for action in parser._actions for option in action.option_strings}
    declared = ["--params", *command_options(stage), "--log"]
    assert set(declared) <= set(taken)
    # what the stage takes beyond its command is optional: the declared command is complete
    assert not any(taken[option].required for option in set(taken) - set(declared))
    args = build_parser(module).parse_args(declared_command(stage))
    assert all(getattr(args, option[2:].replace("-", "_")) is not None for option in declared)


def test_an_option_is_described_by_what_the_declaration_puts_there():
    parser = options_of(build_parser("measure"))["measure"]
    helps = {action.option_strings[0]: action.help for action in parser._actions if action.option_strings}
    assert helps["--data-dir"] == "reads data/prepared (from the tokenize stage)"
    assert helps["--train-metrics"] == ("reads results/train/<recipe>/seed_<seed>/metrics.json (from the train and "
                                        "train_teacher stages)")
    assert helps["--out-dir"] == ("writes results/measure/<recipe>/seed_<seed>/step_<step>: geometry.parquet, "
                                  "loss_vs_loops.parquet, depth.parquet, similarity.parquet, trajectory.parquet, "
                                  "summary.json")
    claims = options_of(build_parser("claims"))["claims"]
    [sweep] = [action for action in claims._actions if "--sweep" in action.option_strings]
    assert not sweep.required and sweep.help.endswith("left out, the claims it feeds are reported as not measured")


def test_a_required_option_left_out_is_named(capsys):
    with pytest.raises(SystemExit):
        build_parser("geometry").parse_args(["geometry", "--params", "params.yaml", "--out-dir", "x"])
    assert "the following arguments are required: --measure-dir" in capsys.readouterr().err
