"""Benchmarks: each ``python -m benchmarks.NAME`` is a command of its own, so the package asks for the thread
settings the ``bertkit`` command makes (:func:`bertkit.tuning.apply_process_defaults`) before any of its
modules starts torch: ``make bench``, a suite run on its own and a reference server it spawns all measure
under what a user of the command gets. Where torch already runs (a test importing a benchmark) it does
nothing."""

from bertkit.tuning import apply_process_defaults

apply_process_defaults()
