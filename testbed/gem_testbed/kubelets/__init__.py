"""What runs the embedded cluster's pods: a simulated scheduler and kubelet, and a process kubelet."""
