"""A campaign: its file (cells, budgets, evaluation options), the run that drives every loop of it
(checkpoints, provenance, progress, Ctrl-C) and the status of a run directory."""
