"""Event-driven triggers: kernel notifications that wake the loop before its next poll.

The kubelet looks every 10 s; the kernel can say within milliseconds that memory use
crossed a threshold (cgroup v1 memcg thresholds), that a cgroup hit memory.high or
memory.max (cgroup v2 ``memory.events``), or that tasks are stalling (PSI triggers).
:class:`~nodeagent.triggers.triggerset.TriggerSet` arms those notifications and
multiplexes them; the loop calls its ``wait`` instead of sleeping and re-reads the
signals on every wake. Where a mechanism is missing, the trigger's status says why and
the periodic poll (:mod:`nodeagent.triggers.schedule`) is the detector.

Modules: :mod:`.api` (Wake, statuses, the Triggers protocol), :mod:`.triggerset` (the
epoll loop), :mod:`.kernel` (system calls), :mod:`.psi` and :mod:`.memcg` (pure rules),
:mod:`.setup` (arming from configuration), :mod:`.schedule` (poll timing),
:mod:`.settings` (configuration fields); the fake triggers the loop's tests use are in
``tests/doubles``. Part of the agent; may import :mod:`nodeagent.base` and
:mod:`nodeagent.k8s`.
"""
