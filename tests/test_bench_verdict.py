"""The benchmark's never-slower rule (bench/verdict.py) on numbers, and the exit
status it gives a run (bench.__main__.exit_status)."""
from __future__ import annotations

import pytest

pytest.importorskip("torch")

from bench import verdict  # noqa: E402
from bench.__main__ import exit_status  # noqa: E402


def test_never_slower_flags_a_consistently_slower_row():
    # tight repetitions (spread ~2 %): the 3 % floor applies; 10.5 > 10.0 * 1.03
    r = verdict.never_slower([10.0, 10.1, 9.9], [10.5, 10.6, 10.4])
    assert r["slower"] is True
    assert r["noise"] == pytest.approx(0.03)
    assert r["limit"] == pytest.approx(10.3)
    assert r["stock_median"] == 10.0 and r["fastfake_median"] == 10.5


def test_never_slower_allows_noise_from_the_spread():
    # stock's repetitions spread by 20 %: 10.5 is within noise of 10.0
    r = verdict.never_slower([10.0, 11.0, 9.0], [10.5, 10.6, 10.4])
    assert r["slower"] is False
    assert r["noise"] == pytest.approx(0.2)
    # fastfake's own spread counts too
    assert verdict.never_slower([10.0, 10.0, 10.0], [9.0, 10.6, 12.0])["slower"] is False
    # but not beyond it: 13 > 10 * 1.2
    assert verdict.never_slower([10.0, 11.0, 9.0], [13.0, 13.1, 12.9])["slower"] is True


def test_never_slower_single_repetition_uses_the_floor():
    assert verdict.spread([5.0]) == 0.0
    assert verdict.never_slower([10.0], [10.2])["slower"] is False
    assert verdict.never_slower([10.0], [10.4])["slower"] is True
    faster = verdict.never_slower([10.0], [5.0])
    assert faster["slower"] is False and faster["ratio"] == pytest.approx(2.0)
    with pytest.raises(ValueError):
        verdict.never_slower([], [1.0])


def _row(name, stock, fast):
    return {"model": "m", "workload": name, "errors": {},
            "runs": {"stock": [{"seconds": x} for x in stock], "fastfake": [{"seconds": x} for x in fast]}}


def test_check_rows_and_exit_status_on_a_synthetic_slower_row():
    rows = [_row("fast", [10.0, 10.2, 9.8], [5.0, 5.1, 4.9]),
            _row("slow", [10.0, 10.1, 9.9], [12.0, 12.1, 11.9]),
            {"model": "m", "workload": "stock failed", "errors": {"stock": "boom"},
             "runs": {"stock": [], "fastfake": [{"seconds": 1.0}]}}]
    slower = verdict.check_rows(rows)
    assert [r["workload"] for r in slower] == ["slow"]
    assert rows[0]["verdict"] == "ok" and rows[1]["verdict"] == "FAIL"
    assert "verdict" not in rows[2]  # nothing to compare
    assert exit_status(rows[:2]) == 1
    assert exit_status(rows[:1]) == 0

    allowed = [_row("slow", [10.0, 10.1, 9.9], [12.0, 12.1, 11.9])]
    verdict.check_rows(allowed, allow_slower=True)
    assert allowed[0]["verdict"] == "slower (allowed)"
    assert exit_status(allowed, allow_slower=True) == 0
    assert exit_status(allowed, allow_slower=False) == 1
