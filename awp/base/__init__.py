"""The base layer: leaf pieces every other layer needs, importing nothing of awp's.

``limits`` (the one validated limits object), ``home`` (the home's paths and
lock), ``sockpath`` (where ``awp.sock`` lives), ``durations``, ``files`` (the
one atomic private-file write) and ``selfcmd`` (the command line that runs
this awp again).  All stdlib only and cheap to import, because the hook and
CLI fast paths use them.  ``tests/unit/test_layers.py`` holds the order.
"""
