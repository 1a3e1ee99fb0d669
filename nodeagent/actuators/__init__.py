"""The agent's hands on the API: node conditions, taints and the pressure annotation
(:mod:`.node_status`), Evictions through the Eviction API (:mod:`.evictor`, guarded by
:mod:`.safety`), and the agent's Events (:mod:`.events`, over the shared recorder).

They apply a :class:`~nodeagent.model.Decision`; they decide nothing. May import
:mod:`nodeagent.base`, :mod:`nodeagent.k8s`, :mod:`nodeagent.kube` and
:mod:`nodeagent.model`.
"""
