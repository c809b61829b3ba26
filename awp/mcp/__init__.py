"""``awp mcp``: awp as an MCP server on stdio.

:mod:`awp.mcp.server` speaks JSON-RPC 2.0 (one message per line) and the MCP
lifecycle; :mod:`awp.mcp.tools` defines the ``awp_*`` tools on top of the
daemon's local API. Why this is not built on the official MCP Python SDK is
written down in ``docs/mcp.md``.
"""
