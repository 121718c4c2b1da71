"""The operator's Prometheus credentials (GEM_PROMETHEUS_*): checked at start, files read each sync,
an unreadable file a named error (never a request without the credentials)."""

from __future__ import annotations

import base64
import logging
from pathlib import Path

import pytest

from gem_operator.api.autoscaling import PrometheusSource
from gem_operator.autoscaling.access import PrometheusCredentials
from gem_operator.envvars import EnvSettingError
from gem_testbed.servers.gateway import make_ca_and_certificate


def test_settings_are_checked_at_start() -> None:
    assert PrometheusCredentials.from_env({}) == PrometheusCredentials()
    with pytest.raises(EnvSettingError, match="GEM_PROMETHEUS_USERNAME and GEM_PROMETHEUS_PASSWORD_FILE go together"):
        PrometheusCredentials.from_env({"GEM_PROMETHEUS_USERNAME": "u"})
    both = {
        "GEM_PROMETHEUS_BEARER_TOKEN_FILE": "/t",
        "GEM_PROMETHEUS_USERNAME": "u",
        "GEM_PROMETHEUS_PASSWORD_FILE": "/p",
    }
    with pytest.raises(EnvSettingError, match="one Authorization header"):
        PrometheusCredentials.from_env(both)


def test_headers_carry_the_tenant_and_the_token_read_at_each_sync(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    creds = PrometheusCredentials.from_env({"GEM_PROMETHEUS_BEARER_TOKEN_FILE": str(token)})
    access = creds.access({"X-Scope-OrgID": "team-ads"})
    assert access.error is None and access.ssl_context is None
    assert dict(access.headers) == {"X-Scope-OrgID": "team-ads", "Authorization": "Bearer first"}
    token.write_text("rotated")  # a projected ServiceAccount token is replaced in place
    assert dict(creds.access({}).headers) == {"Authorization": "Bearer rotated"}


def test_basic_auth(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("s3cret")
    creds = PrometheusCredentials(username="team-ads", password_file=str(tmp_path / "pw"))
    value = creds.access({}).headers["Authorization"]
    assert value == "Basic " + base64.b64encode(b"team-ads:s3cret").decode()


@pytest.mark.parametrize(
    ("write", "says"),
    [
        (None, "GEM_PROMETHEUS_BEARER_TOKEN_FILE: cannot read"),
        ("", "GEM_PROMETHEUS_BEARER_TOKEN_FILE: {path} is empty"),
        ("a\nb", "GEM_PROMETHEUS_BEARER_TOKEN_FILE: {path} holds more than one line"),
    ],
)
def test_an_unusable_token_file_is_an_error_not_a_request_without_it(
    tmp_path: Path, write: str | None, says: str
) -> None:
    path = tmp_path / "token"
    if write is not None:
        path.write_text(write)
    access = PrometheusCredentials(bearer_token_file=str(path)).access({"X-Scope-OrgID": "t"})
    assert access.error is not None and access.error.startswith(says.format(path=path))
    assert not access.headers


def test_the_ca_file(tmp_path: Path) -> None:
    ca, _, _ = make_ca_and_certificate(tmp_path / "pki")
    creds = PrometheusCredentials(ca_file=str(ca))
    first = creds.access({}).ssl_context
    assert first is not None and creds.access({}).ssl_context is first  # built once while the file is unchanged
    bad = tmp_path / "bad.crt"
    bad.write_text("not a certificate")
    assert "GEM_PROMETHEUS_CA_FILE: " in (PrometheusCredentials(ca_file=str(bad)).access({}).error or "")
    gone = PrometheusCredentials(ca_file=str(tmp_path / "missing.crt")).access({}).error
    assert gone is not None and gone.startswith("GEM_PROMETHEUS_CA_FILE: cannot read")


@pytest.mark.parametrize(
    ("headers", "says"),
    [
        ({"Authorization": "Bearer x"}, "Authorization carries a credential"),
        ({"cookie": "s=1"}, "cookie carries a credential"),
        ({"X Tenant": "a"}, "'X Tenant' is not an HTTP header name"),
        ({"X-Scope-OrgID": "a\r\nInjected: 1"}, "the value of X-Scope-OrgID holds a line break"),
    ],
)
def test_a_spec_header_that_is_a_credential_or_malformed_is_refused(headers: dict[str, str], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        PrometheusSource.model_validate({"headers": headers})
    assert PrometheusSource.model_validate({"headers": {"X-Scope-OrgID": "team-ads"}}).headers == {
        "X-Scope-OrgID": "team-ads"
    }


@pytest.mark.parametrize(
    ("creds", "url", "warned"),
    [
        (PrometheusCredentials(bearer_token_file="/t"), "http://prometheus:9090", "GEM_PROMETHEUS_BEARER_TOKEN_FILE"),
        (PrometheusCredentials(bearer_token_file="/t"), "HTTP://prometheus:9090", "GEM_PROMETHEUS_BEARER_TOKEN_FILE"),
        (PrometheusCredentials(username="u", password_file="/p"), "http://mimir/prometheus", "GEM_PROMETHEUS_USERNAME"),
        (PrometheusCredentials(bearer_token_file="/t"), "https://thanos-querier:9091", None),
        (PrometheusCredentials(), "http://prometheus:9090", None),
        (PrometheusCredentials(ca_file="/ca"), "http://prometheus:9090", None),
    ],
)
def test_credentials_bound_for_plain_http_are_warned_of(
    creds: PrometheusCredentials, url: str, warned: str | None
) -> None:
    warning = creds.plain_http_warning(url)
    if warned is None:
        assert warning is None
    else:
        assert warning is not None and warning.startswith(f"{warned} is set") and "use an https URL" in warning


def test_the_operator_warns_once_per_url(caplog: pytest.LogCaptureFixture) -> None:
    from gem_operator.controllers.autoscaler import use_prometheus_credentials, warn_of_plain_http

    use_prometheus_credentials(PrometheusCredentials(bearer_token_file="/t"))
    try:
        with caplog.at_level(logging.WARNING, logger="gem_operator.controllers.autoscaler"):
            for _ in range(3):
                warn_of_plain_http("http://prometheus:9090")
                warn_of_plain_http("https://thanos-querier:9091")
        assert [r.getMessage().split(" is set")[0] for r in caplog.records] == ["GEM_PROMETHEUS_BEARER_TOKEN_FILE"]
    finally:
        use_prometheus_credentials(PrometheusCredentials())
