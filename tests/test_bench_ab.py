"""bench.ab: one acceleration's share of a first compile (fastfake with and without it)."""
from __future__ import annotations

import os

import pytest

from bench import ab, fresh


def _rep(cpu: float, wall: float, compile_s: float | None) -> dict:
    timing = {} if compile_s is None else {"entire_frame_compile": compile_s}
    return {"first": {"cpu": cpu, "wall": wall, "timing": timing}}


def test_summary_is_medians_of_the_first_call_and_the_compile():
    runs = {"with": [_rep(3.0, 3.1, 2.0), _rep(5.0, 5.1, 2.2), _rep(3.2, 3.3, 2.1)],
            "without": [_rep(3.5, 3.6, 2.4), _rep(3.4, 3.5, 2.5), _rep(9.0, 9.1, 2.3)]}
    s = ab.summary(runs)
    assert s["cpu"] == {"with": 3.2, "without": 3.5}
    assert s["wall"] == {"with": 3.3, "without": 3.6}
    assert s["compile"] == {"with": 2.1, "without": 2.4}
    runs["with"][0] = _rep(3.0, 3.1, None)
    assert ab.summary(runs)["compile"]["with"] == pytest.approx(2.15)  # (repetitions without the timing left out)


def test_children_alternate_and_see_the_switch(monkeypatch):
    """The two kinds interleave (the first of each pair alternates), only the
    "without" children see FASTFAKE_DISABLE=<name> (added to one already set), and
    the environment is put back."""
    seen = []
    monkeypatch.setattr(fresh, "make_store", lambda: os.devnull + "-none")
    monkeypatch.setattr(fresh, "run_child",
                        lambda *a, **k: seen.append(os.environ.get("FASTFAKE_DISABLE")) or _rep(1.0, 1.0, 1.0))
    monkeypatch.setenv("FASTFAKE_DISABLE", "store")
    runs = ab.measure("gpt2", "compile_dynamic", "sym_register", 3)
    assert seen == ["store", "store,sym_register", "store,sym_register", "store", "store", "store,sym_register"]
    assert len(runs["with"]) == len(runs["without"]) == 3
    assert os.environ["FASTFAKE_DISABLE"] == "store"
    monkeypatch.delenv("FASTFAKE_DISABLE")
    seen.clear()
    ab.measure("gpt2", "compile_dynamic", "sym_register", 1)
    assert seen == [None, "sym_register"] and "FASTFAKE_DISABLE" not in os.environ


def test_the_switch_is_required():
    with pytest.raises(SystemExit):
        ab.main([])
