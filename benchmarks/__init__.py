"""ember's benchmarks. `python -m ember.benchmarks` is the harness (harness.py: eager, Inductor
and ember on the same models, tables, JSON, CSV, a chart); the scripts beside it
(model_zoo.py, gpu_bench.py, cpu_bench.py, ...) run as files. `models.py` builds the models
they share."""
