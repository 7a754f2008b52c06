"""`agentloop export`: a kernel set written as a self-contained Python package a serving engineer can
load without agentloop — its kernel files, a manifest, torch.library custom ops and an ATen mode."""
