"""gates: batch-invariance enforcement for candidate GPU kernels, usable by any kernel agent."""
