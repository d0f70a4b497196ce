"""Fabric benchmark (see bench/fabric/run.py and docs/benchmarks-fabric.md)."""
