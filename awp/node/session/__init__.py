"""The per-connection session core: protocol rules without I/O.

:class:`Session` (``core.py``) takes lines, store results and the time and
answers with :mod:`actions <awp.node.session.actions>`; :class:`Replay`
(``replay.py``) decides what of the outbox goes next.  The trio driver is
:mod:`awp.node.connection`.  Nothing here imports trio or sqlite3
(``tests/unit/test_layers.py`` holds that).
"""

from . import actions
from .core import CLOSED, CLOSING, OPEN, PAUSE, REFUSED, RESUMED, Session
from .replay import Replay

__all__ = ["CLOSED", "CLOSING", "OPEN", "PAUSE", "REFUSED", "RESUMED", "Replay", "Session",
           "actions"]
