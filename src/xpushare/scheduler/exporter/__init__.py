"""The Prometheus exporter: the series copied out of the node room and formatted in pieces, and the
HTTP endpoint that serves them on the scheduler's loop."""
