"""Secure serving shared by the agent, the scheduler and the extender: one server, one
certificate story, one gate (kube-scheduler's delegated authentication and
authorization); docs/security.md is the operator's view.

* :mod:`~nodeagent.serving.settings`: ``--metrics-auth`` and the TLS options.
* :mod:`~nodeagent.serving.tls`: the serving certificate (given and reloaded, or
  self-signed) and the client CA.
* :mod:`~nodeagent.serving.auth`: who may see which path (TokenReview,
  SubjectAccessReview, client certificates), with the review caches.
* :mod:`~nodeagent.serving.server`: the threaded HTTP(S) server they guard.
"""
