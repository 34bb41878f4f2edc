"""Dynamo/AOTAutograd glue, FX -> MLIR import, compile options, eager fallback."""
