"""Suite-wide test settings.

Hypothesis's timing checks (the per-example deadline and the slow-generation health
check) measure the machine, not the code: on a loaded two-core CI machine they fail
tests whose properties hold. Every property test runs without them; correctness is what
the examples assert.
"""

from hypothesis import HealthCheck, settings

settings.register_profile(
    "gpushare", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("gpushare")
