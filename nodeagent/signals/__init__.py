"""Reading the node's pressure signals, as the kubelet computes them, from the kernel.

The modules, from the entry point down:

* :mod:`~nodeagent.signals.collector`: :class:`SignalCollector`, the one object the
  agent uses; reads groups of signals into a :class:`~nodeagent.model.NodeObservations`.
* :mod:`~nodeagent.signals.memory`, :mod:`~nodeagent.signals.filesystems`,
  :mod:`~nodeagent.signals.pids`, :mod:`~nodeagent.signals.psi`,
  :mod:`~nodeagent.signals.pod_storage`: one reader per kind of source.
* :mod:`~nodeagent.signals.cgroups`: where the hierarchies, the node, kubepods and the
  pods' cgroups are.
* :mod:`~nodeagent.signals.parse` (pure) and :mod:`~nodeagent.signals.files`: the
  kernel's file formats, and reading them cheaply.
Every path is resolved below a host root, so the same code reads ``/`` on bare metal,
``/host`` in a DaemonSet, and a fixture tree in tests (``tests/doubles/host.py`` writes
fake hosts in the kernel's formats). See docs/signals.md.

Part of the agent; may import :mod:`nodeagent.base`, :mod:`nodeagent.k8s`,
:mod:`nodeagent.model` and :mod:`nodeagent.cri` (the image filesystem's usage).
"""
