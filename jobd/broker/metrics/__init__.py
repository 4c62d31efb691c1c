"""`GET /metrics`: the registry Prometheus scrapes and the counters the events feed."""
