"""The sidecar: the control loop, its HTTP endpoints, its own metrics and decision log."""
