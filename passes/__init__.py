"""ember's passes (Python, on real MLIR), their registry and the pipeline builder."""
