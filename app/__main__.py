"""``python -m app``: launch the dashboard on 127.0.0.1:7860 (see ``--help``)."""

from app.app import main

raise SystemExit(main())
