"""The broker: the HTTP API (thin routes) wired to the store and the controllers."""
