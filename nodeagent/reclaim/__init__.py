"""Node-level reclaim before a disk eviction: dead containers, then unused images oldest
first, only until the pressure is relieved (the kubelet removes every unused image).

:mod:`.plan` decides (pure), :mod:`.reclaimer` acts through :mod:`nodeagent.cri` and
re-reads the filesystems, :mod:`.cycle` fits it into an evaluation cycle. Part of the
agent; may import the shared :mod:`nodeagent.base` and :mod:`nodeagent.k8s`, and the
agent's :mod:`nodeagent.model`, :mod:`nodeagent.cri`, :mod:`nodeagent.eviction` and
:mod:`nodeagent.actuators`.
"""
