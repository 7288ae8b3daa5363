"""sparkpair_testbed: a simulated pair of DGX Sparks on one Linux machine (docs/testbed.md).

Two network namespaces act as the nodes (real sshd, Docker engines, OpenMPI, stand-ins for the
NVIDIA tools), a third plays the QSFP cable; `python -m sparkpair_testbed` (`scripts/testbed`)
brings them up, injects faults and resets them, and the pytest plugin (plugin.py, entry point
`pytest11`) hands them to tests.  The modules need only the standard library; the plugin needs
pytest.
"""
