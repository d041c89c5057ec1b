"""The upstream (nginx/): the native runner's renderer of the image's templates."""

from __future__ import annotations

from ktor_lab.parts import nginx


def test_renderer_keeps_nginx_variables_and_replaces_only_named_ones():
    out = nginx.render_template("a ${NGINX_PORT} $NGINX_PORT $host ${other}", {"NGINX_PORT": "80"})
    assert out == "a 80 80 $host ${other}"
