"""Model loader: multi-stream verified pulls, resumable, with node and peer caches. No torch here."""
