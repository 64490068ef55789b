"""The steady verdict's trend: window means, so one noisy last update does not warn."""

import pytest

from pilot_tui.analysis.loss_trend import loss_trend


def test_a_falling_curve_whose_last_update_is_noisy_fell():
    losses = [1.0, 0.98, 0.95, 0.93, 0.9, 0.88, 0.86, 0.85, 0.83, 0.82, 0.8, 1.05]
    assert losses[-1] > losses[0]  # the two single updates would have said "did not fall"
    trend = loss_trend(losses)
    assert trend.window == 3 and trend.fell


def test_a_flat_or_rising_curve_did_not_fall_and_says_its_window_means():
    trend = loss_trend([0.70, 0.71, 0.69, 0.72, 0.70, 0.73, 0.71, 0.74])
    assert not trend.fell
    assert trend.said(8) == "loss did not fall over 8 updates (0.705 -> 0.725, means of the first and last 2)"


def test_four_updates_or_fewer_compare_the_first_with_the_last():
    assert (
        loss_trend([4.696, 4.75, 4.889, 4.855]).said(4) == "loss did not fall over 4 updates (4.696 -> 4.855)"
    )
    assert loss_trend([2.0, 1.0]).fell
    with pytest.raises(ValueError):
        loss_trend([])
