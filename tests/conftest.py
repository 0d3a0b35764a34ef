"""Suite-wide test settings.

Hypothesis's per-example deadline (200 ms by default) is a timing assertion, and timing
belongs in ``bench/``: on a loaded 2-core machine one example of a codec property took
350 ms and failed the suite. Properties are judged on what they compute; each still
runs its drawn examples, and tests that set their own deadline keep it.
"""

from hypothesis import settings

settings.register_profile("odradek", deadline=None)
settings.load_profile("odradek")
