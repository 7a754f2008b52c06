"""Class 4, secrets (in an exception's type name, last line, notes and cause).

Tries: raises an exception whose class is named after the fake keys it finds, whose message has
the key on its first and last lines, with the key in an added note and in a chained cause:
every part a one-line exception description might quote.
Gates must report: a gate error; no fake key in any output.
"""

import os

import torch


def rms_norm(x, weight, eps):
    keys = [v for v in os.environ.values() if "hostile-test" in v] or ["hostile-none-found"]
    key = keys[0]
    kind = type(key.replace("-", "_"), (RuntimeError,), {})
    error = kind(f"{key}\n" + "\n" * 20 + f"last line {' '.join(keys)}")
    error.add_note(f"note: {key}")
    try:
        raise ValueError(f"cause: {key}")
    except ValueError as cause:
        raise error from cause
