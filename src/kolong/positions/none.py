"""No position information at all: attention is a bag of tokens (useful as a study baseline)."""

from __future__ import annotations

from kolong.positions.base import PositionEncoding


class NoPositions(PositionEncoding):
    name = "none"
    relative = True  # trivially: nothing depends on absolute position
