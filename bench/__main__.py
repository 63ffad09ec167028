"""``python -m bench``: see :mod:`bench.suite`."""

from .suite import main

raise SystemExit(main())
