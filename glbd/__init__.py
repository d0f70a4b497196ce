"""glbd: Global Load Balancing control plane for Linux leaf-spine routers."""

__version__ = "0.1.0"
