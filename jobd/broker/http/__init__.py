"""The broker's HTTP plumbing: route decorators from the wire's table, body caps, request
timing, fast JSON responses and the fast path for the busiest routes."""
