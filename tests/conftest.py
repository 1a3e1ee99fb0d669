"""Settings shared by the whole suite.

Hypothesis' per-example deadline (200 ms by default) measures the machine, not the
code: on a shared 2-core CI machine a property test can miss it while another process
holds the cores, and fail with nothing wrong. Properties here assert behaviour; speed
is measured by benchmarks/, so the deadline is off everywhere.
"""

from hypothesis import settings

settings.register_profile("nodeagent", deadline=None)
settings.load_profile("nodeagent")
