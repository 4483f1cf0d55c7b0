"""sil_demo (what `make demo` runs): options and the tracking report, without processes (the
runs themselves go through SimHarness, covered by test_sil_regression / test_sil_harness)."""

from __future__ import annotations

import pytest

from fibril_sim_ros.examples import sil_demo
from fibril_sim_ros.examples.sil_demo import Tracking, report


@pytest.mark.parametrize(('argv', 'message'), [
    (['--duration', '0'], '--duration must be within 0.1 .. 60 s of sim time, got 0.0'),
    (['--manifest', '/nonexistent.yaml'], '--manifest /nonexistent.yaml: no such file'),
    (['--mode', 'lockstep'], "invalid choice: 'lockstep'"),
])
def test_bad_options_exit_2_naming_the_option(argv, message, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        sil_demo.main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_the_default_manifest_is_the_drivetrain_example() -> None:
    assert sil_demo.default_manifest().is_file()
    assert sil_demo.default_manifest().parts[-3:] == ('examples', 'drivetrain', 'simulation.yaml')


def test_report_shows_tracking_and_real_time_factor() -> None:
    speeds = [(i * 0.002, min(10.6, i * 0.1)) for i in range(1, 1500)]
    result = Tracking('sync', 10.0, speeds, reached_s=0.19, peak=10.6, steady_error=0.01,
                      real_time_factor=2.5, wall_s=1.2)
    text = report(result)
    assert result.ok and result.overshoot == pytest.approx(0.06)
    assert 'real-time factor 2.50' in text
    assert 'within 5 % after 0.190 s (bound 0.5 s)' in text
    assert 'overshoot 6.0 % (bound 10 %)' in text and text.endswith('OK')
    late = Tracking('realtime', 10.0, speeds, None, 12.0, 0.5, 0.9, 3.0)
    assert not late.ok and 'within 5 % after never' in report(late)
