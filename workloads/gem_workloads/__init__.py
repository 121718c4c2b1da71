"""What runs inside the pods: training, serving, precompute, model loading. Never imports gem_operator."""
