"""The size bar of src/: short functions, modules and module docstrings, so the tree stays readable.

A function over the limit is cut into named steps (``make_plan``, the CLI's
``simulate``); a module over it is split at its seams (``cli/views/``,
``sdk/queue.py``); a module docstring over it keeps one line of why and moves
the rest to docs/ (docs/triton-facts.md). The one exception is the simulator
engines' loops, flat for speed (``plan/simulator/engines/__init__.py``).
Lengths count lines from ``def`` (or the docstring's first quote) to the last.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "autobatch"

FUNCTION_LINES = 100
"""No function or method in src/ longer than this."""
POLICY_FUNCTION_LINES = 60
"""policy/ holds the decisions a newcomer extends: its functions stay shorter."""
MODULE_LINES = 650
DOCSTRING_LINES = 30
"""A module docstring says what the module is for and why; figures go to docs/."""

FLAT_ON_PURPOSE = {
    ("plan/simulator/engines/triton.py", "run_triton"),
    ("plan/simulator/engines/rules.py", "run_rules"),
    ("plan/simulator/engines/general.py", "run_general"),
}
"""The engines' per-batch loops: one flat loop each, for speed."""

POLICY = "policy/"


def _modules() -> list[tuple[str, ast.Module, int]]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        out.append((path.relative_to(SRC).as_posix(), ast.parse(text, str(path)), len(text.splitlines())))
    return out


MODULES = _modules()


def _functions(tree: ast.Module) -> list[tuple[str, int, int]]:
    """(name, first line, length) of every function and method, nested ones too."""
    return [(node.name, node.lineno, node.end_lineno - node.lineno + 1)  # type: ignore[operator]
            for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _docstring_lines(tree: ast.Module) -> int:
    first = tree.body[0] if tree.body else None
    if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        return first.end_lineno - first.lineno + 1  # type: ignore[operator]
    return 0


def _too_long_functions(in_policy: bool, limit: int) -> list[str]:
    return [
        f"{rel}:{line} {name}: {length} lines"
        for rel, tree, _ in MODULES if rel.startswith(POLICY) == in_policy
        for name, line, length in _functions(tree)
        if length > limit and (rel, name) not in FLAT_ON_PURPOSE
    ]


def _too_long_modules(in_policy: bool) -> list[str]:
    return [f"{rel}: {n} lines" for rel, _, n in MODULES
            if rel.startswith(POLICY) == in_policy and n > MODULE_LINES]


def _too_long_docstrings(in_policy: bool) -> list[str]:
    return [f"{rel}: {_docstring_lines(tree)} lines" for rel, tree, _ in MODULES
            if rel.startswith(POLICY) == in_policy and _docstring_lines(tree) > DOCSTRING_LINES]


def test_the_walk_sees_the_tree() -> None:
    names = {rel for rel, _, _ in MODULES}
    assert {"cli/planner.py", "plan/planner.py", "policy/core.py"} <= names
    assert all((rel, name) in {(r, n) for r, t, _ in MODULES for n, _, _ in _functions(t)}
               for rel, name in FLAT_ON_PURPOSE), "an exempted engine loop moved: update FLAT_ON_PURPOSE"


def test_no_function_outside_policy_is_over_100_lines() -> None:
    long = _too_long_functions(in_policy=False, limit=FUNCTION_LINES)
    assert not long, f"over {FUNCTION_LINES} lines, cut into named steps: {long}"


def test_no_module_outside_policy_is_over_650_lines() -> None:
    long = _too_long_modules(in_policy=False)
    assert not long, f"over {MODULE_LINES} lines, split at a seam: {long}"


def test_no_module_docstring_outside_policy_is_over_30_lines() -> None:
    long = _too_long_docstrings(in_policy=False)
    assert not long, f"module docstrings over {DOCSTRING_LINES} lines, move the detail to docs/: {long}"


def test_no_function_in_policy_is_over_60_lines() -> None:
    long = _too_long_functions(in_policy=True, limit=POLICY_FUNCTION_LINES)
    assert not long, f"policy/: over {POLICY_FUNCTION_LINES} lines, cut into named stages or rules: {long}"


def test_no_module_in_policy_is_over_650_lines() -> None:
    long = _too_long_modules(in_policy=True)
    assert not long, f"policy/: over {MODULE_LINES} lines, split at a seam: {long}"


def test_no_module_docstring_in_policy_is_over_30_lines() -> None:
    long = _too_long_docstrings(in_policy=True)
    assert not long, f"policy/: docstrings over {DOCSTRING_LINES} lines, move the detail to docs/: {long}"
