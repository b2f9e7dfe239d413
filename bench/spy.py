"""Shares of a sampling profile: where a first compile's time goes, without the
per-call cost cProfile adds to small functions (``bench.layers``).

Record one fresh-process repetition with py-spy (``pip install py-spy``; not a
dependency of fastfake), in its collapsed-stack form:

    py-spy record -r 200 -f raw -o gpt2.txt -- \\
        python -m bench.fresh --child --model gpt2 --workload compile_dynamic --impl fastfake --no-second

then read it:

    python -m bench.spy gpt2.txt                      # the layer table
    python -m bench.spy gpt2.txt --children handle_sym_dispatch
    python -m bench.spy gpt2.txt --match 'eliminate_dead_code|impure_pred'

Only samples under the timed first trace count (``bench.fresh``'s ``_timed``: not the
imports, ``install()`` or the warm-up compile). A function's share is inclusive:
the samples with it anywhere on the stack. Python frames only: time in C is its
caller's. A collection of the cyclic collector is charged to whatever frame
allocated when it started (``_GcTimer`` shows the collector's callbacks only).
"""
from __future__ import annotations

import argparse
import collections
import re
import sys

ROOT = "_timed (bench/fresh.py"

#: (label, pattern of a frame's function name) as the layer table lists them.
LAYERS = (
    ("AOTAutograd (`aot_module_simplified`)", r"^aot_module_simplified$"),
    ("Dynamo `wrap_fx_proxy`", r"^wrap_fx_proxy$"),
    ("Dynamo `get_fake_value`", r"^get_fake_value$"),
    ("`FakeTensorMode.__torch_dispatch__` (calls reaching Python)", r"^FakeTensorMode\.__torch_dispatch__$"),
    ("`FunctionalTensor.__new__`", r"^FunctionalTensor\.__new__$"),
    ("SymNode operations (`_make_node_magic`)", r"^_make_node_magic\.<locals>\.capture_provenance"),
    ("SymInt operators (`_make_user_magic`)", r"^_make_user_magic\.<locals>\.(r?binary|unary)_magic_impl$"),
    ("`handle_sym_dispatch` in Python", r"^handle_sym_dispatch$"),
    ("dead-code elimination", r"^Graph\.eliminate_dead_code$"),
    ("the partitioner", r"^(min_cut_rematerialization_partition|default_partition)$"),
    ("a graph module's call (`call_wrapped`: AOTAutograd tracing Dynamo's graph, the compiled graph's run)",
     r"^GraphModule\.recompile\.<locals>\.call_wrapped$"),
    ("`torch.utils._pytree`", r"^(tree_|_tree_|TreeSpec|_is_leaf|_get_node_type|tree_flatten)"),
)


def read(path: str, root: str = ROOT) -> tuple[int, list[tuple[list[str], int]]]:
    """(samples under ``root``, [(frames from the outermost ``root`` frame in, count)])."""
    stacks = []
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip().rpartition(" ")
            if not n.isdigit():
                continue
            frames = stack.split(";")
            at = next((i for i, fr in enumerate(frames) if root in fr), None)
            if at is None:
                continue
            names = [fr.split(" (")[0] for fr in frames[at:]]
            stacks.append((names, int(n)))
            total += int(n)
    return total, stacks


def inclusive(stacks, pattern: str) -> int:
    rx = re.compile(pattern)
    return sum(n for names, n in stacks if any(rx.search(x) for x in names))


def children(stacks, name: str, depth: int = 1) -> collections.Counter:
    out: collections.Counter = collections.Counter()
    for names, n in stacks:
        if name in names:
            i = names.index(name)
            out[" > ".join(names[i + 1:i + 1 + depth]) or "<own>"] += n
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.spy", description=__doc__.splitlines()[0])
    p.add_argument("raw", help="py-spy's raw (collapsed) output")
    p.add_argument("--root", default=ROOT, help="count only samples under this frame")
    p.add_argument("--match", action="append", default=[], help="a regular expression of function names")
    p.add_argument("--children", help="the callees of this function, by share of its samples")
    p.add_argument("--depth", type=int, default=1)
    args = p.parse_args(argv)
    total, stacks = read(args.raw, args.root)
    if not total:
        print(f"no samples under {args.root!r}", file=sys.stderr)
        return 1
    if args.children:
        kids = children(stacks, args.children, args.depth)
        own = sum(kids.values())
        print(f"{args.children}: {own} samples, {100 * own / total:.1f} % of {total}")
        for k, v in kids.most_common(25):
            print(f"  {100 * v / own:5.1f} %  {k}")
        return 0
    rows = [(p_, p_) for p_ in args.match] if args.match else LAYERS
    print(f"| layer (inclusive) | share of {total} samples |")
    print("| --- | --- |")
    for label, pattern in rows:
        print(f"| {label} | {100 * inclusive(stacks, pattern) / total:.1f} % |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
