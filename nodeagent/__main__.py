"""``python -m nodeagent`` runs the CLI."""

from nodeagent.cli import main

raise SystemExit(main())
