import os

# Triton kernels run through the interpreter on this CPU-only machine.
os.environ.setdefault("TRITON_INTERPRET", "1")
