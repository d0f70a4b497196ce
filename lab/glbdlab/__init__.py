"""glbd lab harness: network namespaces, veth links, a leaf-spine fabric and FRR instances.

* :mod:`glbdlab.netns`         ``Lab``: namespaces/veths under a per-run tag, always cleaned up;
                                 ``Netns``: run/arun/popen/spawn/socket/ping inside a namespace
* :mod:`glbdlab.topology`      ``leaf_spine(S, L)`` addressing plan; ``Fabric`` build/destroy,
                                 status, tbf ``shape``, ``cut``/``restore``, nft ``drop``
* :mod:`glbdlab.provision`     FRR 10.x (Debian sid) debootstrap chroot, ``glbd-lab provision``
* :mod:`glbdlab.frr`           ``FrrInstance`` (sid 10.x or host 8.4) per namespace, vtysh JSON,
                                 BGP/BFD/route waits; ``fabric_bgp_config``, ``start_fabric_frr``
* :mod:`glbdlab.capture`       golden FRR 10.x NHC/NNHN and BFD captures (tests/vectors/frr10_*)
* :mod:`glbdlab.pytest_plugin` fixtures ``netns_lab``, ``lab_fabric``; ``netns``/``frr`` skips
* :mod:`glbdlab.cli`           ``glbd-lab provision|up|status|down``
"""
