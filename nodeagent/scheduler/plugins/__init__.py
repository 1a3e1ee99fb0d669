"""The plugins: one module per plugin, each exporting ``NAME``, ``new(args, handle)``,
its ``Args`` model when it takes ``pluginConfig`` args, and its rejection reasons."""
