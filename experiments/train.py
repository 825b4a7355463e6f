r"""Trains a hash mapping as a config says; prints the result table.

  python -m experiments.train --config=configs/talr_ap.py --workdir=runs/talr_ap
  python -m experiments.train --config=configs/talr_ap.py:model=mlp,bits=16 --config.num_steps=500
  python -m experiments.train --config=configs/lambdarank_knn.py:method=ranknet --workdir=runs/ranknet_knn

Restarting the same command resumes from the last checkpoint in ``workdir``.
The work is done by :func:`experiments.methods.train_and_evaluate`.
"""

import os

from absl import app, flags
from ml_collections import config_flags

from experiments import common, methods

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a configs/*.py file[:argument].")
_WORKDIR = flags.DEFINE_string("workdir", None, "Checkpoints and results (default: runs/<config name>).")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  common.quiet_library_logs()
  common.pad_malloc_heaps()
  config = _CONFIG.value
  workdir = _WORKDIR.value or common.default_workdir(config.name)
  results = methods.train_and_evaluate(config, workdir)
  print(common.format_table(results["rows"], columns=results["columns"]))
  s = results["summary"]
  ttt = s["time_to_target"]
  print(f"train step throughput: {s['examples_per_sec']:.0f} examples/s; training time {s['train_time']:.1f} s; "
        + (f"target {config.target_metric} reached at step {ttt['step']} after "
           f"{ttt['train_time']:.1f} s of training" if ttt else "target not reached" if config.target
           else "no target set"))
  print(f"results: {os.path.join(workdir, 'results.json')}")


if __name__ == "__main__":
  flags.mark_flag_as_required("config")
  app.run(main)
