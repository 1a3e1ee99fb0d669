"""The agent program: its configuration (:mod:`.config`, :mod:`.settings`), its metrics
(:mod:`.metrics`), the pods on its node (:mod:`.podinfo`, :mod:`.podcache`,
:mod:`.pods`), the loop that wakes on triggers, reads signals, evaluates and acts
(:mod:`.loop`, :mod:`.actuation`), and the runtime that wires it all
(:mod:`.runtime`).

The top of the agent: may import every agent package (:mod:`nodeagent.signals`,
:mod:`nodeagent.triggers`, :mod:`nodeagent.eviction`, :mod:`nodeagent.actuators`,
:mod:`nodeagent.reclaim`, :mod:`nodeagent.cri`, :mod:`nodeagent.model`) and the shared
layers. Nothing outside the command line imports it.
"""
