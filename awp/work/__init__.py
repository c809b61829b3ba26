"""`awp work`: a client of the local API that works a queue's items with a command."""
