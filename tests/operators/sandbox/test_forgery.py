"""Forging a pass must not work: the verdict is computed on the host from reported values."""

from __future__ import annotations

from textwrap import dedent

import pytest

from operators.sandbox import IOCase, Sandbox, TestSpec

TESTS = TestSpec(asserts="assert add(2, 3) == 5\nassert add(-1, 1) == 0\nassert add(10, 5) == 15")
WRONG = "def add(a, b):\n    return a - b\n"


def test_correct_program_passes_and_wrong_one_fails(sandbox: Sandbox) -> None:
    good = sandbox.run("def add(a, b):\n    return a + b\n", TESTS)
    assert (good.exec_status, good.tests_passed, good.tests_total) == ("ok", 3, 3)
    bad = sandbox.run(WRONG, TESTS)
    assert (bad.exec_status, bad.tests_passed, bad.tests_total) == ("ok", 0, 3)


@pytest.mark.parametrize(
    "tail",
    [
        "import os\nos._exit(0)",
        "import sys\nsys.exit(0)",
        "print('All tests passed!')\nprint('3/3 passed')\nprint('ok ok ok')",
        "import os\nos.close(3)",
        "import os\nfor i in range(3):\n    os.write(3, f'{i}\\tok\\ttrue\\n'.encode())",
        "import os\nfor i in range(3):\n    os.write(3, f'{i}\\tok\\t{{\"i\": 5}}\\n'.encode())",
    ],
    ids=["os_exit", "sys_exit", "fake_output", "close_report_fd", "fake_reports", "bad_tags"],
)
def test_exit_early_or_fake_reports_do_not_pass(sandbox: Sandbox, tail: str) -> None:
    res = sandbox.run(WRONG + tail, TESTS)
    assert res.tests_passed == 0 and res.tests_total == 3


ALWAYS_EQUAL = [
    """
class Any:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = object.__hash__
def add(a, b): return Any()
""",
    """
class I(int):
    def __eq__(self, other): return True
def add(a, b): return I(0)
""",
    """
class S(str):
    def __eq__(self, other): return True
    def __hash__(self): return 0
def add(a, b): return [S()]
""",
    """
class Meta(type):
    def __eq__(cls, other): return True
class X(metaclass=Meta): pass
def add(a, b): return X
""",
]


@pytest.mark.parametrize("program", ALWAYS_EQUAL, ids=["object", "int_sub", "str_sub", "meta"])
def test_always_equal_objects_do_not_pass(sandbox: Sandbox, program: str) -> None:
    res = sandbox.run(program, TESTS)
    assert res.tests_passed == 0


FRAME_WALK = dedent("""
    import sys, gc, builtins
    def add(a, b):
        f = sys._getframe(1)
        while f is not None:
            g = f.f_globals
            if "encode" in g:  # the harness: make every report claim success
                g["encode"] = lambda value, depth=0: True
                g["eval"] = lambda *a, **k: True
            for k in list(f.f_locals):
                if k in ("value", "line", "passed", "results"):
                    f.f_locals[k] = True
            f = f.f_back
        for o in gc.get_objects():
            if isinstance(o, dict) and "probes" in o:
                o["probes"] = [["eval", "True"]] * len(o["probes"])
        builtins.AssertionError = type("Never", (Exception,), {})
        return a - b
""")


def test_frame_walking_and_patching_the_harness_do_not_pass(sandbox: Sandbox) -> None:
    res = sandbox.run(FRAME_WALK, TESTS)
    assert res.exec_status == "ok" and res.tests_passed == 0


def test_expected_values_are_not_inside(sandbox: Sandbox) -> None:
    """A program that searches all it can reach for the expected literal finds nothing."""
    program = dedent("""
        import gc, re, sys
        def add(a, b):
            pat, texts = re.compile(r"\\d{12}"), []
            f = sys._getframe()
            while f:
                texts.append(repr(f.f_locals) + repr(f.f_globals))
                f = f.f_back
            texts += [repr(o) for o in gc.get_objects() if isinstance(o, (str, list, dict))]
            texts.append(open("/proc/self/cmdline").read())
            for m in pat.finditer(" ".join(texts)):
                return int(m.group())
            return -1
    """)
    res = sandbox.run(program, TestSpec(asserts="assert add(1, 2) == 987654321987"))
    assert res.exec_status == "ok" and res.tests_passed == 0
    leaky = sandbox.run(program, TestSpec(asserts="x = 987654321987\nassert add(1, 2) == x"))
    assert leaky.tests_passed == 1  # the same search does find a value that is inside


def test_stdio_fake_output_does_not_pass(sandbox: Sandbox) -> None:
    tests = TestSpec(io=(IOCase("2 3\n", "5\n"), IOCase("10 20\n", "30\n")))
    good = sandbox.run("a, b = map(int, input().split())\nprint(a + b)", tests)
    assert (good.tests_passed, good.tests_total) == (2, 2)
    forged = "print('5'); print('30'); print('PASSED'); import os; os._exit(0)"
    res = sandbox.run(forged, tests)
    assert res.tests_passed == 0
