"""Faults for the operator under test: a fault-injecting API proxy, the chaos driver, malformed inputs."""
