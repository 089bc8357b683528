"""The committed run's figures, drawn again from its committed tables in a copy of the repository (DVC, every
figure stage forced): no text of any of them leaves its figure or axes or covers another (`save_figure` warns of
each in the job's log), as the smoke run's figures are held to in tests/test_end_to_end.py."""

from __future__ import annotations

import pytest
from workspace import ROOT, copy_repository, figure_logs, figure_stages, run

from twoscale.config.parameter_files import read_raw
from twoscale.pipeline.declaration.jobs import stages
from twoscale.report.figures import UNREADABLE


@pytest.mark.slow
def test_every_figure_of_the_committed_run_has_every_text_readable(tmp_path):
    copy_repository(tmp_path, ROOT / "params.yaml")
    names = [stage.dvc_name(job) for stage in stages(read_raw(ROOT / "params.yaml"))
             if stage.name in figure_stages() for job in stage.jobs()]
    run(["dvc", "repro", "--force", "--single-item", *names], tmp_path, TWOSCALE_TRACKING="off")
    logs = figure_logs(tmp_path)
    assert len(logs) == len(names)  # the premise: every figure job drew, and logged
    assert [line for log in logs for line in log.read_text().splitlines() if UNREADABLE in line] == []
