"""glbd lab harness: network namespaces, veth links, a leaf-spine fabric and FRR instances.

* :mod:`glbd.lab.netns`         namespaces/veths with a per-run tag, always cleaned up (``Lab``)
* :mod:`glbd.lab.pytest_plugin` the ``netns_lab`` fixture and the ``netns``/``frr`` markers' skips
"""
