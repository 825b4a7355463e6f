r"""Trains a hash mapping as a config says; prints the result table.

  python -m experiments.train --config=configs/talr_ap.py --workdir=runs/talr_ap
  python -m experiments.train --config=configs/talr_ap.py:model=mlp,bits=16 --config.num_steps=500
  python -m experiments.train --config=configs/lambdarank_knn.py:method=ranknet --workdir=runs/ranknet_knn
  python -m experiments.train --config=configs/talr_ap.py --help   # the config's fields and defaults

``--config.<field>=<value>`` sets one field (lists as ``--config.baselines=lsh,itq``).
Restarting the same command resumes from the last checkpoint in ``workdir``.
The work is done by :func:`experiments.methods.train_and_evaluate`; run from the root of the clone.
"""

import os


from experiments import cli, methods, reporting



def main(config):
  workdir = cli.workdir(reporting.default_workdir(config.name), launcher="experiments.train")
  results = methods.train_and_evaluate(config, workdir)
  print(reporting.format_table(results["rows"], columns=results["columns"]))
  s = results["summary"]
  ttt = s["time_to_target"]
  print(f"train step throughput: {s['examples_per_sec']:.0f} examples/s; training time {s['train_time']:.1f} s; "
        + (f"target {config.target_metric} reached at step {ttt['step']} after "
           f"{ttt['train_time']:.1f} s of training" if ttt else "target not reached" if config.target
           else "no target set"))
  print(f"results: {os.path.join(workdir, 'results.json')}")


if __name__ == "__main__":
  cli.run(main)
