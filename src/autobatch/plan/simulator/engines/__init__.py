"""The simulator's engines: each turns arrival times into batches (sizes, starts, ends).

Each engine is one long flat loop on purpose (``run_triton``, ``run_rules``,
``run_general``), the one exception to the project's 100-line limit for a
function (``tests/unit/test_code_size.py``). The loop runs once per batch
over a million requests and more, so it keeps its state in local variables
and makes no call per step that it can avoid. ``benchmarks/simulator.py`` is the bar a change to it keeps
(``--against REV`` times it side by side with a commit).
"""
