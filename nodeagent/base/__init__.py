"""The ground floor: what every part of both programs uses, importing nothing of nodeagent.

* :mod:`.clock`: the injected clock (real and fake), so decisions take ``now``;
* :mod:`.durations`: Go's duration grammar (``1m30s``);
* :mod:`.errors`: the error types and the exit codes they map to;
* :mod:`.heap`: keeping long-lived objects out of the garbage collector's way;
* :mod:`.logs`: structured log records, rendered as text or JSON, and their field names.
"""
