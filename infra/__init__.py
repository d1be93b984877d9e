"""The local stack (emulators + functions-framework servers), the topology
declaration, and the ``dcm-status`` command line."""
