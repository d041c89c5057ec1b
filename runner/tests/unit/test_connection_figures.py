"""New connections and full TLS handshakes per 1,000 requests, from nginx's connection log."""

from ktor_lab.measure import connection_figures
from ktor_lab.parts.nginx import Connection


def conn(tls: str = "", resumed: bool = False) -> Connection:
    return Connection(
        at=0.0, protocol="HTTP/1.1", scheme="https" if tls else "http", tls_version=tls, resumed=resumed
    )


def test_a_tls_case_with_no_new_connection_made_no_full_handshake_rather_than_none():
    assert connection_figures([], 1000, over_tls=True).full_tls_per_1000_requests == 0.0
    assert connection_figures([], 1000, over_tls=False).full_tls_per_1000_requests is None


def test_only_full_handshakes_count_and_resumed_ones_do_not():
    new = [conn("TLSv1.3"), conn("TLSv1.3", resumed=True), conn("TLSv1.3", resumed=True), conn("TLSv1.3")]
    figures = connection_figures(new, 2000, over_tls=True)
    assert (figures.per_1000_requests, figures.full_tls_per_1000_requests) == (2.0, 1.0)
