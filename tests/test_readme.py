"""The README's Python blocks run as written."""

import pathlib
import re

import pytest

_README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
_BLOCKS = re.findall(r"```python\n(.*?)```", _README.read_text(encoding="utf-8"), flags=re.S)


def test_the_readme_has_python_blocks():
  assert len(_BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(_BLOCKS)))
def test_readme_block_runs(index):
  exec(compile(_BLOCKS[index], f"README.md block {index}", "exec"), {"__name__": "readme"})  # pylint: disable=exec-used
