"""awp conform: the conformance suite any AWP peer can be checked against.

``scenarios`` holds the fifteen scenarios of the public suite and ours, ``conn`` a
deadline-bound blocking connection (over ``wswire`` for the WebSocket binding,
whose own scenarios are ``ws_scenarios``), ``schema`` the checks every line the peer
sends must pass, and ``runner`` the connect and listen modes and the report.
Nothing here shares code with the daemon's engine beyond the pure wire
helpers (ids, keys, canonical JSON, timestamps).
"""
