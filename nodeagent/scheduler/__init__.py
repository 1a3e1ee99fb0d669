"""A kube-scheduler-compatible scheduler that also reads the agent's pressure reports.

Layout (the pure core first; nothing here touches the clock, files or the network):

* :mod:`.api` - statuses and the scheduler's view of Pods and Nodes;
  :mod:`.objects` turns listed Kubernetes objects into it; :mod:`.resources` computes
  effective requests;
* :mod:`.snapshot` - the cluster by column, for vectorized plugins;
* :mod:`.framework` - extension points, cycle state, the plugin runtime;
  :mod:`.registry` - the explicit plugin registry; :mod:`.plugins` - one module each;
* :mod:`.config` - ``KubeSchedulerConfiguration`` parsing, defaulting, validation;
* :mod:`.scheduling` - one scheduling cycle (node selection, scoring, selectHost);
* :mod:`.planner` - the offline planner behind ``nodeagent schedule``.

See docs/scheduler.md.
"""
