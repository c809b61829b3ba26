"""Presentation: how records, posts, budgets and states read to a human or a model.

Shared by the CLI, the hooks and the MCP server (and open to the dashboard),
so none of them borrows another's rendering.  It takes the local API's dicts
and returns text; it holds no state and talks to nothing.  Stdlib only at
import time: ``awp hook`` imports it on its fast path.
"""
