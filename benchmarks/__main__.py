"""`python -m ember.benchmarks`: see harness.py."""
import sys

from .harness import main

sys.exit(main())
