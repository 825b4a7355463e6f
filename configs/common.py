"""What the configs share: the parser of a config's argument, ``--config=configs/x.py:<arg>``."""

from __future__ import annotations

import ml_collections


def parse_arg(arg: str | None, **spec) -> ml_collections.ConfigDict:
  """``"model=mlp,runlocal"`` -> ``{"model": "mlp", "runlocal": True, ...}`` (big_vision style).

  ``spec`` names every key the argument may set and its default: a bool (a
  bare ``key`` sets it True), an int or a string (``key=value``, typed like
  the default), a tuple of strings (the allowed values, the first is the
  default) or a type (values of that type, default None).

  >>> parse_arg("model=mlp,runlocal", model=("linear", "mlp"), bits=int, runlocal=False).to_dict()
  {'bits': None, 'model': 'mlp', 'runlocal': True}
  """
  values = {k: (v[0] if isinstance(v, tuple) else None if isinstance(v, type) else v) for k, v in spec.items()}
  expected = ", ".join(k if isinstance(v, bool) else f"{k}=..." for k, v in spec.items())
  for token in filter(None, (t.strip() for t in (arg or "").split(","))):
    key, eq, value = token.partition("=")
    kind = spec.get(key)
    if key not in spec or (not eq and not isinstance(kind, bool)) or (eq and isinstance(kind, bool)):
      raise ValueError(f"config argument: expected comma-separated {expected}, got {token!r} in {arg!r}")
    if isinstance(kind, bool):
      values[key] = True
    elif isinstance(kind, tuple):
      if value not in kind:
        raise ValueError(f"config argument: expected {key} in {list(kind)}, got {value!r}")
      values[key] = value
    else:
      values[key] = (kind if isinstance(kind, type) else type(kind))(value)
  return ml_collections.ConfigDict(values)
