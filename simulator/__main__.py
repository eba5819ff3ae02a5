"""``python -m simulator`` is ``infersim``."""

from simulator.cli import main

raise SystemExit(main())
