"""The research lab built on bertkit, kept out of the library: the experiment matrix runner
(:mod:`lab.experiment`), the reports written from its result files (:mod:`lab.report`) and the ``make run``
demo (:mod:`lab.demo`). ``python -m lab experiment|report CONFIG.toml`` is its command line.

It imports bertkit; bertkit never imports it (tests/test_layering.py), and the bertkit wheel does not ship it:
it runs from the repository root.
"""

# Each ``python -m lab ...`` is a command of its own: it asks for the thread settings the ``bertkit`` command
# makes before any lab module starts torch (as benchmarks/__init__.py does; nothing once torch runs).
from bertkit.tuning import apply_process_defaults  # noqa: E402

apply_process_defaults()
