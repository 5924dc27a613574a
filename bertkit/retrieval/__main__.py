import sys

from bertkit.tuning import apply_process_defaults

apply_process_defaults()  # a command of its own: the thread settings the `bertkit` command makes, before torch

from .sts import main  # noqa: E402

sys.exit(main())
