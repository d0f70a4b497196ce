"""Fabric benchmark of issue 7 (see bench/fabric/run.py and docs/benchmarks-fabric.md)."""
