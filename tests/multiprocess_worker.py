"""One of the processes that tests/test_multiprocess.py starts: sharded search (weighted too, and over one
multi-index per process), histograms,
evaluation and a short data-parallel TALR run over the devices of every process.

  python tests/multiprocess_worker.py PROCESS_ID NUM_PROCESSES HOST:PORT FOLDER

``FOLDER`` holds the database the test wrote (``db.npy``, read through a memory map: this process reads only the
rows :func:`hashjax.sharding.process_rows` names) and the queries, labels and affinities (``inputs.npz``); the
answers go to ``FOLDER/out<PROCESS_ID>.npz``.
"""

import json
import os
import sys

import numpy as np

#: The database's rows and code length (4 devices split 203 rows with 1 padding row); the evaluated database's
#: rows and code length (204 rows with 3 padding rows, which evaluate_codes leaves out with num_db; each process
#: checks the padding bits past num_bits of its own rows).
NUM_DB, NUM_BITS, NUM_EVAL, EVAL_BITS = 203, 40, 201, 40
#: The k of the k-NN searches (NUM_DB: more than one shard's rows) and the radii, one per query.
KS = (5, NUM_DB)
RADII = (0, 3, 9, 40, 12, 1, 7)
TRAIN_STEPS = 3


def write_inputs(folder: str) -> None:
  """The seeded databases (``db.npy``, ``eval_db.npy``) and queries, labels, affinities (``inputs.npz``): a few
  distinct codes, so many ties."""
  from hashjax import codes  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  pool = rng.integers(0, 2, (12, NUM_BITS))
  db = np.asarray(codes.pack_bits(pool[rng.integers(0, 12, NUM_DB)]))
  q = np.asarray(codes.pack_bits(np.concatenate([pool[:3], rng.integers(0, 2, (len(RADII) - 3, NUM_BITS))])))
  eval_pool = rng.integers(0, 2, (12, EVAL_BITS))
  eval_db = np.asarray(codes.pack_bits(eval_pool[rng.integers(0, 12, NUM_EVAL)]))
  eval_q = np.asarray(codes.pack_bits(np.concatenate([eval_pool[:3], rng.integers(0, 2, (4, EVAL_BITS))])))
  np.save(os.path.join(folder, "db.npy"), db)
  np.save(os.path.join(folder, "eval_db.npy"), eval_db)
  np.savez(os.path.join(folder, "inputs.npz"), q=q, qlab=rng.integers(0, 3, q.shape[0]),
           xlab=rng.integers(0, 3, NUM_DB), aff=rng.integers(0, 4, (q.shape[0], NUM_DB)), eval_q=eval_q,
           eval_qlab=rng.integers(0, 3, eval_q.shape[0]), eval_xlab=rng.integers(0, 3, NUM_EVAL),
           weights=np.where(np.arange(NUM_BITS) % 7 == 0, 0.0, rng.uniform(0, 2, NUM_BITS)).astype(np.float32))


def talr_run(mesh):
  """``(params, losses)`` of TALR-AP (query vs rest, a linear mapping to 8 bits) after :data:`TRAIN_STEPS` Adam
  steps on one seeded batch of 24 items in 3 classes, data-parallel over ``mesh`` (None: one device)."""
  import jax  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  from hashjax import mappings  # pylint: disable=g-import-not-at-top
  from hashjax import train as train_lib  # pylint: disable=g-import-not-at-top
  from hashjax.objectives import talr  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(1)
  labels = np.arange(24) % 3
  x = (rng.normal(size=(24, 16)) + labels[:, None]).astype(np.float32)
  batch = {"features": x, "affinity": (labels[:, None] == labels[None]).astype(np.int32)}
  mapping = mappings.make_mapping("linear", num_bits=8)
  params = mappings.init(jax.random.key(0), mapping, x)
  loss_fn = talr.query_vs_rest(mapping, metric=talr.metric_fn("ap"), num_bits=8)
  params, history = train_lib.train(params=params, loss_fn=loss_fn, optimizer=optax.adam(0.05),
                                    batch_fn=lambda step: batch, num_steps=TRAIN_STEPS, log_every=1, mesh=mesh)
  flat = np.concatenate([np.asarray(p).ravel() for p in jax.tree.leaves(params)])
  return flat, np.asarray([h["loss"] for h in history])


def main(argv):
  process_id, num_processes, address, folder = int(argv[1]), int(argv[2]), argv[3], argv[4]
  from hashjax import sharding  # pylint: disable=g-import-not-at-top
  sharding.initialize_processes(coordinator_address=address, num_processes=num_processes, process_id=process_id)
  import jax  # pylint: disable=g-import-not-at-top
  from hashjax import evaluate, search  # pylint: disable=g-import-not-at-top

  mesh = sharding.data_mesh()
  db = np.load(os.path.join(folder, "db.npy"), mmap_mode="r")
  with np.load(os.path.join(folder, "inputs.npz")) as f:
    inputs = dict(f)
  q = inputs["q"]
  rows = sharding.process_rows(NUM_DB, mesh)
  xs = sharding.shard_process_rows(np.array(db[rows]), mesh, num_rows=NUM_DB, pad=True)
  out = {"process_count": jax.process_count(), "device_count": jax.device_count(),
         "rows": np.array([rows.start, rows.stop]), "global_rows": xs.shape[0]}
  for k in KS:
    out[f"knn{k}_d"], out[f"knn{k}_i"] = (np.asarray(a) for a in sharding.knn(q, xs, k, num_db=NUM_DB))
  from hashjax import index  # pylint: disable=g-import-not-at-top
  from hashjax.index import multi  # pylint: disable=g-import-not-at-top
  multi.SCAN_BELOW_WORDS = 0  # probed, as a larger block would be, not scanned outright
  own = index.build_multi_index(np.array(db[rows]), num_bits=NUM_BITS, num_tables=2)
  for k in KS:
    out[f"mih{k}_d"], out[f"mih{k}_i"] = (np.asarray(a) for a in sharding.multi_index_knn(
        own, q, k, first_row=rows.start))
  out["wknn_d"], out["wknn_i"] = (np.asarray(a) for a in sharding.knn(q, xs, 7, num_db=NUM_DB,
                                                                     weights=inputs["weights"]))
  try:  # a search of this process's memory refuses a database split over processes
    search.knn_with_ties(q, xs, 3)
  except ValueError as e:
    out["ties_error"] = np.array(str(e))
  res = sharding.radius_search(q, xs, np.asarray(RADII), num_db=NUM_DB)
  for field in ("distances", "indices", "offsets"):
    out[f"radius_{field}"] = np.asarray(getattr(res, field))
  out["hist_labels"] = np.asarray(sharding.hamming_histogram(q, xs, num_bits=NUM_BITS, query_labels=inputs["qlab"],
                                                             db_labels=inputs["xlab"], num_db=NUM_DB))
  out["hist_affinity"] = np.asarray(sharding.hamming_histogram(q, xs, inputs["aff"], num_bits=NUM_BITS,
                                                               num_db=NUM_DB))
  eval_db = np.load(os.path.join(folder, "eval_db.npy"), mmap_mode="r")
  eval_rows = sharding.process_rows(NUM_EVAL, mesh)
  xe = sharding.shard_process_rows(np.array(eval_db[eval_rows]), mesh, num_rows=NUM_EVAL, pad=True)
  table = evaluate.evaluate_codes(inputs["eval_q"], xe, num_bits=EVAL_BITS, query_labels=inputs["eval_qlab"],
                                  db_labels=inputs["eval_xlab"], radius=3, k=20, num_db=NUM_EVAL)
  out["eval_rows"] = np.array([eval_rows.start, eval_rows.stop, xe.shape[0]])
  out["evaluate"] = np.array(json.dumps(table))
  out["talr_params"], out["talr_losses"] = talr_run(mesh)
  np.savez(os.path.join(folder, f"out{process_id}.npz"), **out)


if __name__ == "__main__":
  main(sys.argv)
