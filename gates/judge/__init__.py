"""The judge's side of the trust boundary: sandboxed judge workers, the client of the caged runner,
arenas and runner pools, the environment both get, and the compiled-kernel store."""
