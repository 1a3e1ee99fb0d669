"""One module per subcommand; each exposes ``register(subparsers)`` and sets ``handler``.

:data:`nodeagent.cli.COMMANDS` lists them with their one-line summaries, and the CLI
imports a subcommand's module only when that subcommand is used: what a module imports at
its top is paid by its own subcommand (and its ``--help``) alone. Imports that only
``run`` needs go inside it.

The top of the house: may import every package.
"""
