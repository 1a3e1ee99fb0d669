"""How operators watch the agent: metrics, health probes and systemd notifications.

* :mod:`~nodeagent.observability.metrics`: :class:`AgentMetrics`, every Prometheus
  metric on a registry of its own.
* :mod:`~nodeagent.observability.health`: :class:`Health`, what ``/healthz`` and
  ``/readyz`` answer.
* :mod:`~nodeagent.observability.server`: :class:`ObservabilityServer`, the HTTP server
  for both.
* :mod:`~nodeagent.observability.sdnotify`: :class:`SystemdNotifier`, ``READY=1`` and
  the watchdog under ``Type=notify``.
* :mod:`~nodeagent.observability.settings`: their configuration fields.

The loop wires them once; see docs/operations.md for names, units and alerts.
"""
