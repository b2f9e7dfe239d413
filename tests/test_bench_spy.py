"""bench/spy.py: a sampling profile's shares, counted under the timed first trace only."""
from __future__ import annotations

from bench import spy

RAW = """\
<module> (x.py:1);main (bench/fresh.py:420);_warmup (bench/fresh.py:99);aot_module_simplified (a.py:1) 50
<module> (x.py:1);main (bench/fresh.py:420);_timed (bench/fresh.py:132);run (w.py:1);aot_module_simplified (a.py:1);dispatch_trace (p.py:1);Graph.eliminate_dead_code (g.py:1);dispatch_trace.<locals>.impure_pred (p.py:2) 3
<module> (x.py:1);main (bench/fresh.py:420);_timed (bench/fresh.py:132);run (w.py:1);aot_module_simplified (a.py:1);handle_sym_dispatch (p.py:9);_GeneratorContextManager.__exit__ (c.py:1) 6
<module> (x.py:1);main (bench/fresh.py:420);_timed (bench/fresh.py:132);run (w.py:1);wrap_fx_proxy (b.py:1);get_fake_value (u.py:1) 11
"""


def test_shares_count_only_the_timed_trace(tmp_path, capsys):
    path = tmp_path / "raw.txt"
    path.write_text(RAW)
    total, stacks = spy.read(str(path))
    assert total == 20  # (the warm-up's 50 samples left out)
    assert spy.inclusive(stacks, r"^aot_module_simplified$") == 9
    assert spy.inclusive(stacks, r"^get_fake_value$") == 11
    assert spy.children(stacks, "handle_sym_dispatch") == {"_GeneratorContextManager.__exit__": 6}
    assert spy.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "| AOTAutograd (`aot_module_simplified`) | 45.0 % |" in out
    assert "| dead-code elimination | 15.0 % |" in out
    assert spy.main([str(path), "--children", "Graph.eliminate_dead_code"]) == 0
    assert "100.0 %  dispatch_trace.<locals>.impure_pred" in capsys.readouterr().out


def test_no_samples_is_an_error(tmp_path):
    path = tmp_path / "raw.txt"
    path.write_text("<module> (x.py:1);f (y.py:2) 5\n")
    assert spy.main([str(path)]) == 1
