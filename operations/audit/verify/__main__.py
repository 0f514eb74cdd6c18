"""`python -m operations.audit.verify`, or `python verify/` on a copy of this directory alone."""

from __future__ import annotations

import sys

if __package__:
    from .cli import main
else:  # run as a directory: import the directory as a package from its parent
    import importlib
    from pathlib import Path

    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here.parent))
    main = importlib.import_module(f"{here.name}.cli").main

sys.exit(main())
