"""The ``pacms`` command line."""
