"""Where candidates are judged: the stages and their settings, the worker pool and its jobs, the
cached evaluator, the benchmark and its timer, and the Ray back-end (cluster/)."""
