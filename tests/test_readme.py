"""The README's code blocks run as written: its Python blocks in this process, its shell commands in a subprocess.

Shell lines run from the repository root, with two changes: ``pip install ...`` (the environment running this
suite is that install) and ``pytest`` (this suite) are left out, and every experiment writes to a temporary
``--workdir`` (absl takes the last of a repeated flag) rather than into the clone.
"""

import pathlib
import re
import shlex
import subprocess
import sys

import pytest

_ROOT = pathlib.Path(__file__).resolve().parents[1]
_README = (_ROOT / "README.md").read_text(encoding="utf-8")
_BLOCKS = re.findall(r"```python\n(.*?)```", _README, flags=re.S)


def _shell_commands():
  commands = []
  for block in re.findall(r"```bash\n(.*?)```", _README, flags=re.S):
    for line in block.splitlines():
      line = line.split("  #")[0].strip()
      for part in filter(None, (p.strip() for p in line.split("&&"))):
        if not part.startswith(("pip install", "pytest")):
          commands.append(part)
  return commands


_COMMANDS = _shell_commands()


def test_the_readme_has_python_blocks_and_commands():
  assert len(_BLOCKS) >= 2
  assert any("experiments.evaluate --config=configs/baselines.py" == c.split("python -m ")[-1] for c in _COMMANDS)


@pytest.mark.parametrize("index", range(len(_BLOCKS)))
def test_readme_block_runs(index):
  exec(compile(_BLOCKS[index], f"README.md block {index}", "exec"), {"__name__": "readme"})  # pylint: disable=exec-used


@pytest.mark.parametrize("command", _COMMANDS)
def test_readme_command_runs(command, tmp_path):
  args = shlex.split(command)
  assert args[:2] == ["python", "-m"], f"README command not run by this test: {command}"
  args = [sys.executable] + args[1:]
  for block in _BLOCKS:  # the data a command reads is written by the README's own block
    if "experiments.evaluate_codes" in command and "codes.npz" in block:
      exec(compile(block, "README.md", "exec"), {"__name__": "readme"})  # pylint: disable=exec-used
  if "--help" not in args:
    args.append(f"--workdir={tmp_path / 'run'}")
  done = subprocess.run(args, cwd=_ROOT, capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
  if "--help" in args:
    assert "--config.bits=" in done.stdout
  elif "experiments.evaluate_codes" in command:
    assert "CalcTopMap" in done.stdout and (tmp_path / "run" / "results.json").exists()
  elif "experiments.evaluate" in command:
    assert "itq" in done.stdout and (tmp_path / "run" / "results.json").exists()
    if "--config.plots=True" in command:
      assert (tmp_path / "run" / "ap_vs_bits.png").exists()
  else:
    assert (tmp_path / "run" / "model" / "model.json").exists()
