"""Suite-wide test settings.

Hypothesis's per-example deadline (200 ms by default) is a timing assertion, and timing
belongs in ``bench/``: on a loaded 2-core machine one example of a codec property took
350 ms and failed the suite. Properties are judged on what they compute; each still
runs its drawn examples, and tests that set their own deadline keep it.

odradek's own pytest plugin (odradek/testing/pytest_plugin.py: ``odradek_broker``,
``odradek_bootstrap``, ``odradek_topic``) is named here so it loads from a checkout
too, where its entry point is not installed; with it installed it still loads once.
"""

from hypothesis import settings

pytest_plugins = ["odradek.testing.pytest_plugin"]

settings.register_profile("odradek", deadline=None)
settings.load_profile("odradek")
