"""ModelScope routes of the stand-in hub (filled in below)."""

from __future__ import annotations

from typing import Any

from hubcore import HubError


def route(handler: Any, parts: list[str]) -> None:
    raise HubError(404, None, "Not Found")
