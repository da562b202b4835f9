"""The service-facing kernel: what a service may use of the server."""
