"""agentloop: an LLM optimisation loop for GPU kernels that keeps batch invariance."""
