"""Source hygiene: every module compiles with warnings as errors (invalid escapes in docstrings) and holds no
control characters (a ``\\f`` or ``\\b`` written unescaped into a file becomes one: ``\\frac`` loses its ``\\f``)."""

import pathlib
import warnings

import pytest

_ROOT = pathlib.Path(__file__).resolve().parents[1]
_SOURCES = sorted(p for d in ("hashjax", "experiments", "configs", "tests") for p in (_ROOT / d).rglob("*.py"))


@pytest.mark.parametrize("path", _SOURCES, ids=lambda p: str(p.relative_to(_ROOT)))
def test_source_compiles_without_warnings(path):
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    compile(path.read_text(encoding="utf-8"), str(path), "exec")


@pytest.mark.parametrize("path", _SOURCES, ids=lambda p: str(p.relative_to(_ROOT)))
def test_source_holds_no_control_characters(path):
  bad = [(number, line) for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1)
         if any(ord(c) < 32 and c not in "\t\r" for c in line)]
  assert not bad, f"{path}: control characters on lines {[n for n, _ in bad]}"


def test_a_bad_escape_is_caught():
  with warnings.catch_warnings(), pytest.raises(SyntaxError):
    warnings.simplefilter("error")
    compile('"""\\frac and \\m"""\n', "<bad>", "exec")
