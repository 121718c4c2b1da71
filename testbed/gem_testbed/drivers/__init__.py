"""The drivers behind `gemop demo` and `gemop loadtest`, and the closed loop the load test runs."""
