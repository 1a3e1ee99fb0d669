"""``python -m nodeagent`` runs the CLI.

Guarded: the scheduler's binding process is started with ``spawn``, which imports the
parent's main module (as ``__mp_main__``) in the child; unguarded, the child would run
the CLI again."""

from nodeagent.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
