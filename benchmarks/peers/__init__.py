"""Peer systems of the benchmark suite: each module times the suite's problems on one peer."""
