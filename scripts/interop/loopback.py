"""Importing this makes aiortc gather 127.0.0.1 first: aioice skips loopback when it
lists host addresses, and shoal's interop tests run on loopback only."""

import aioice.ice

_original_get_host_addresses = aioice.ice.get_host_addresses


def _loopback_first(use_ipv4: bool, use_ipv6: bool) -> list[str]:
    addresses = _original_get_host_addresses(use_ipv4, use_ipv6)
    if use_ipv4 and "127.0.0.1" not in addresses:
        addresses.insert(0, "127.0.0.1")
    return addresses


aioice.ice.get_host_addresses = _loopback_first
