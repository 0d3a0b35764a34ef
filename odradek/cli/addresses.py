"""``--bootstrap-server`` / ``--bootstrap-controller`` lists for the tools that speak
the wire themselves (``leader-election``, ``reassign-partitions``, ``metadata-quorum``).

How this works and why: those tools have their own
``BrokerConnection`` (the requests they send are not the AdminClient's), and each
reports a failure as one line through its own error class. They read the address list
the same way — comma-separated ``HOST:PORT``, IPv6 hosts in brackets, a port in
1..65535 — so the rule lives here once and raises the calling tool's error.
"""

from __future__ import annotations


def parse_addresses(option: str, text: str, error: type[Exception]) -> list[tuple[str, int]]:
    """(host, port) for each ``HOST:PORT`` of ``text``; ``error`` names ``option`` and
    the first item that is not one."""
    addresses = []
    for item in text.split(","):
        host, sep, port = item.strip().rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise error(f"{option}: {item.strip()!r} is not HOST:PORT")
        addresses.append((host, int(port)))
    return addresses
