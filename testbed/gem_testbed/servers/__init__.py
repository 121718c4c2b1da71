"""Helper servers the test rig starts on loopback: Prometheus, the nginx model origin, simulated DCGM."""
