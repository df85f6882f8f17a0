"""The suite's own rule, checked on its sources: no test waits a fixed time and then asserts.

A fixed wait is a call of ``sleep`` or ``pause`` with a duration (``time.sleep(0.3)``,
``await asyncio.sleep(1)``, ``await pilot.pause(0.2)``; ``pilot.pause()`` without one only lets
pending messages run). Outside a loop (a loop is a poll), one that is followed in its block by an
``assert`` before anything waits on a condition (``wait_until``, ``pilot_until``, ``wait_state``,
``wait_screen``, a thread's ``join``, a process's ``communicate``, ... or a loop) fails here: on a
loaded machine the time passes and the state is not there yet. Wait on the condition instead
(``tests/helpers/waits.py``). A wait whose length no assertion depends on (the clock must move
between two scrapes for a rate) says so on its line: ``# not a wait: <why>``."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
MARK = "# not a wait:"
#: calls that wait on a condition: what follows them is not timed
WAITS = {"until", "wait_until", "pilot_until", "wait_for", "wait_state", "wait_screen", "wait_dead", "wait",
         "_wait", "communicate", "join", "readline", "wait_value", "wait_table", "settle"}


def _name(func: ast.expr) -> str | None:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _fixed_wait(st: ast.stmt) -> bool:
    if not isinstance(st, ast.Expr):
        return False
    call = st.value.value if isinstance(st.value, ast.Await) else st.value
    return isinstance(call, ast.Call) and _name(call.func) in ("sleep", "pause") and bool(call.args or call.keywords)


def _waits(node: ast.AST) -> bool:
    """Whether ``node`` calls something that waits on a condition (``" ".join`` does not)."""
    return any(isinstance(n, ast.Call) and _name(n.func) in WAITS
               and not (isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Constant))
               for n in ast.walk(node))


def _blocks(tree: ast.AST):
    """Every statement list, and whether it is a loop's body."""
    for node in ast.walk(tree):
        loop = isinstance(node, (ast.While, ast.For, ast.AsyncFor))
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block, loop and field == "body"


def fixed_waits_then_asserts(src: str) -> list[tuple[int, int]]:
    """(line of the fixed wait, line of the assert after it) for each one in the Python text ``src``."""
    lines = src.splitlines()
    found = []
    for block, in_loop in _blocks(ast.parse(src)):
        if in_loop:
            continue
        for i, st in enumerate(block):
            if not _fixed_wait(st) or MARK in lines[st.lineno - 1]:
                continue
            for nxt in block[i + 1:]:
                if isinstance(nxt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    continue  # defined here, run later: its asserts do not follow the wait
                if isinstance(nxt, (ast.While, ast.For, ast.AsyncFor)) or _fixed_wait(nxt):
                    break
                asserts = [n for n in ast.walk(nxt) if isinstance(n, ast.Assert) and not _waits(n.test)]
                if asserts:
                    found.append((st.lineno, asserts[0].lineno))
                    break
                if _waits(nxt):
                    break
    return found


def test_no_test_waits_a_fixed_time_then_asserts():
    bad = [f"{p.relative_to(TESTS)}:{w}: a fixed wait, then the assert of line {a}"
           for p in sorted(TESTS.rglob("*.py")) if "__snapshots__" not in p.parts
           for w, a in fixed_waits_then_asserts(p.read_text(encoding="utf-8"))]
    assert not bad, "wait on the condition instead (tests/helpers/waits.py):\n" + "\n".join(bad)


def test_the_check_finds_a_fixed_wait_and_lets_polls_and_waits_pass():
    flagged = '''
async def t(pilot, app):
    await pilot.pause(0.3)
    text = app.status()
    assert "ready" in text

def u(p):
    time.sleep(0.5)
    p.kill()
    assert p.poll() is not None
'''
    assert fixed_waits_then_asserts(flagged) == [(3, 5), (8, 10)]
    fine = '''
async def t(pilot, app, src):
    while not src.ready():
        await pilot.pause(0.05)
    assert src.ready()
    await pilot.pause()
    assert app.ok
    time.sleep(0.1)
    assert src.wait_state("ready", 10)
    time.sleep(0.1)
    wait_until(lambda: src.n > 2)
    assert src.n > 2
    time.sleep(0.02)  # not a wait: the clock moves between two scrapes
    assert src.scrape().rate > 0

def emitter(a):
    time.sleep(a.delay)

    def later(step):
        assert step > 0
        return step
'''
    assert fixed_waits_then_asserts(fine) == []
