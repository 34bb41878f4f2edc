"""The differential fuzzer: random graphs (graphs.py, ops.py) compared with eager (runner.py)."""
