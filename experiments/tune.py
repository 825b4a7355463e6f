r"""Grid search of training hyper-parameters on the validation split (never the queries).

  python -m experiments.tune --config=configs/talr_ap.py \
      --grid="learning_rate=1e-3,3e-3,1e-2;alpha=1,2" --workdir=runs/tune_talr_ap

Every combination trains from scratch on a validation split of the training
set, ``--split`` (``config.eval_split``). ``validation`` (the default): queries
are carved out of the training set (``config.val_per_class`` per class) and
searched against the rest of it, which is also what is trained on.
``validation_heldout`` mirrors the test protocol: a further
``config.val_heldout_per_class`` items per class are kept out of training but
stay in the database, so the database holds unseen items as the test's does
(``experiments.tasks.evaluation_split``):

  python -m experiments.tune --config=configs/talr_ap.py:bits=16 --split=validation_heldout \
      --grid="standardize=True,False;augment_shift=0,1" --workdir=runs/tune_talr_ap16_heldout

The grid search itself is :func:`experiments.methods.tune` (a library function, so
this module only holds the flags); every combination is checked before the first trains,
and ``--help`` with a ``--config`` lists the fields a grid can vary. The table of validation
scores is printed and written to ``<workdir>/tuning.json``; copy the best values into the config.
"""

from __future__ import annotations

from absl import flags

from experiments import cli, methods, reporting

_GRID = flags.DEFINE_string("grid", None, "'key=v1,v2;key2=v3,...' over config fields (required).")
_SPLIT = flags.DEFINE_enum("split", "validation", ["validation", "validation_heldout"],
                           "Validation split to score on (config.eval_split); never the test queries.")


def main(config):
  rows = methods.tune(config, _GRID.value, cli.workdir(reporting.default_workdir("tune_" + config.name),
                                                     launcher="experiments.tune"),
                      split=_SPLIT.value)
  key = config.target_metric  # best first: the lowest error, else the highest score
  for row in sorted(rows, key=lambda r: r[key] if key.endswith("error") else -r[key]):
    print("  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))


if __name__ == "__main__":
  # Every combination of the grid is checked (fields, ranges, memory) before the first one trains.
  cli.run(main, required=["grid"], check=lambda config: methods.tune_trials(config, _GRID.value, _SPLIT.value),
          configs_of="experiments.train")
