"""Runtimes: adapters that carry out plans (local, mpi, dask)."""
