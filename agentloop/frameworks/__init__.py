"""Other agent frameworks on the same gates: an OpenAI-compatible endpoint in front of any of our
providers (`endpoint.py`, `agentloop serve-llm`), the gates as an OpenEvolve evaluator
(`openevolve_evaluator.py`), and the driver the `openevolve` style runs OpenEvolve's controller
in (`openevolve_run.py`, its own process)."""
