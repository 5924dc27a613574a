import sys

from .sts import main

sys.exit(main())
