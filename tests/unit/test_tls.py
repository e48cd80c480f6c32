"""broker/net/tls.py and the TLS keys of broker/config.py: listener security
protocols, ssl.* settings and what is refused, SSL contexts from PEM files and
strings (errors name the key, never the material), subjects rendered as
Java's X500Principal prints them, ssl.principal.mapping.rules."""

from __future__ import annotations

import re
import ssl
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.config import KEYS, ConfigError, load_config
from broker.net.security_setup import listener_tls as _listener_tls
from broker.net.tls import (
    ANONYMOUS,
    PrincipalMapper,
    client_context,
    openssl_cipher_name,
    server_context,
    subject_dn,
    tls_settings,
)
from protocol.exceptions import ProtocolError
from tests.tls_certs import CLIENT_DN, KEY_PASSWORD, make_certs, openssl_or_skip


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    openssl_or_skip()
    return make_certs(tmp_path_factory.mktemp("certs"))


def load(extra: dict[str, str], warnings: list | None = None):
    raw = {"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093", **extra}
    return load_config(raw, warn=(warnings.append if warnings is not None else lambda _: None))


def der(path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(path.read_text())


# --------------------------------------------------------------------------- listener.security.protocol.map


def test_default_map_names_protocols_and_ssl_is_accepted():
    config = load({})
    assert config.security_protocols == {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_sasl_listeners_load_and_kafkas_default_gssapi_is_refused_in_one_line(protocol):
    from broker.net.sasl_listener import sasl_listeners

    config = load({"listeners": f"{protocol}://127.0.0.1:9092"})
    assert config.security_protocols == {protocol: protocol}
    with pytest.raises(ConfigError) as error:
        sasl_listeners(config, dict)
    assert "sasl.enabled.mechanisms: GSSAPI" in str(error.value) and "\n" not in str(error.value)
    config = load({"listeners": "CLIENTS://127.0.0.1:9092", "listener.security.protocol.map": f"CLIENTS:{protocol}"})
    assert config.security_protocol("CLIENTS") == protocol


def test_a_listener_missing_from_the_map_is_an_error():
    with pytest.raises(ConfigError, match="listener INTERNAL has no security protocol"):
        load({"listeners": "INTERNAL://127.0.0.1:9092"})
    with pytest.raises(ConfigError, match="listener SSL has no security protocol"):
        load({"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT"})
    with pytest.raises(ConfigError, match="NAME:PROTOCOL"):
        load({"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:TLS"})
    config = load({"listeners": "INTERNAL://127.0.0.1:9092", "listener.security.protocol.map": "internal:ssl"})
    assert config.security_protocol("INTERNAL") == "SSL"


def test_kraft_controller_listeners_default_to_plaintext_unless_tls_is_in_use():
    combined = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": "1@127.0.0.1:9093",
        "controller.listener.names": "CONTROLLER",
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
    }
    assert load_config(combined).security_protocol("CONTROLLER") == "PLAINTEXT"
    with pytest.raises(ConfigError, match="listener CONTROLLER has no security protocol"):
        load_config({**combined, "listeners": "SSL://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"})


# --------------------------------------------------------------------------- ssl.* keys


def test_ssl_keys_are_kept_apart_from_the_described_keys(certs):
    warnings: list[str] = []
    config = load(
        {
            "ssl.keystore.location": str(certs.server_keystore),
            "ssl.key.password": "secret",
            "listener.name.ssl.ssl.client.auth": "required",
            "listener.name.nosuch.ssl.client.auth": "required",
            "ssl.no.such.key": "x",
        },
        warnings,
    )
    # DescribeConfigs walks KEYS and config.values: no TLS key, no password, is among them.
    assert not any(k.startswith(("ssl.", "listener.name.")) for k in KEYS)
    assert not any(k.startswith(("ssl.", "listener.name.")) for k in config.values)
    assert "secret" not in repr(config.values) and "secret" not in repr(tls_settings(config, "SSL"))
    assert config.ssl_settings("SSL")["ssl.client.auth"] == "required"
    assert "ssl.client.auth" not in config.ssl_settings("PLAINTEXT")
    assert any("listener.name.nosuch.ssl.client.auth names no listener" in w for w in warnings)
    assert any("unknown config key ssl.no.such.key" in w for w in warnings)


def test_per_listener_settings_win_key_by_key():
    config = load({"ssl.client.auth": "requested", "ssl.enabled.protocols": "TLSv1.2", "listener.name.ssl.ssl.client.auth": "none"})
    settings_ = tls_settings(config, "SSL")
    assert settings_.client_auth == "none"
    assert settings_.max_version == ssl.TLSVersion.TLSv1_2  # the global key still applies
    assert tls_settings(config, "OTHER").client_auth == "requested"


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"ssl.keystore.type": "JKS"}, "JKS is a Java keystore format pybroker cannot read"),
        ({"listener.name.ssl.ssl.truststore.type": "PKCS12"}, "listener.name.ssl.ssl.truststore.type: PKCS12 is a Java keystore"),
        ({"ssl.keystore.password": "x"}, "ssl.keystore.password: not used with PEM files; set ssl.key.password"),
        ({"ssl.truststore.password": "x"}, "ssl.truststore.password: not used with PEM files"),
        ({"ssl.enabled.protocols": "TLSv1.1,TLSv1.2"}, "only TLSv1.2 and TLSv1.3 can be enabled, not TLSv1.1"),
        ({"ssl.protocol": "SSLv3"}, "ssl.protocol: expected TLS, TLSv1.2 or TLSv1.3"),
        ({"ssl.client.auth": "sometimes"}, "ssl.client.auth: expected none, requested or required"),
        ({"ssl.cipher.suites": "TLS_NO_SUCH_SUITE"}, "TLS_NO_SUCH_SUITE is not a cipher suite"),
        ({"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"}, "TLS 1.3 suites cannot be chosen one by one"),
        ({"ssl.endpoint.identification.algorithm": "ldaps"}, "expected https or empty"),
        ({"ssl.principal.mapping.rules": "RULE:broken"}, "ssl.principal.mapping.rules: invalid rule"),
        ({"ssl.engine.factory.class": "com.example.Factory"}, "Java (JSSE) plug-in"),
        ({"ssl.keymanager.algorithm": "NewSunX509"}, "only Java's defaults"),
        ({"ssl.keystore.location": "/a", "ssl.keystore.key": "k", "ssl.keystore.certificate.chain": "c"}, "not both"),
        ({"ssl.keystore.key": "k"}, "needs ssl.keystore.key too"),
    ],
)
def test_settings_that_cannot_be_honoured_are_refused(extra, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        tls_settings(load(extra), "SSL")


def test_protocols_and_cipher_suites_map_onto_openssl():
    settings_ = tls_settings(load({"ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}), "SSL")
    assert settings_.openssl_ciphers == "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384"
    # Java would offer no TLS 1.3 suite, so TLS 1.3 is off.
    assert settings_.max_version == ssl.TLSVersion.TLSv1_2
    all13 = ",".join(c["name"] for c in ssl.create_default_context().get_ciphers() if c["protocol"] == "TLSv1.3")
    settings_ = tls_settings(load({"ssl.cipher.suites": all13}), "SSL")
    assert settings_.openssl_ciphers is None and settings_.max_version == ssl.TLSVersion.TLSv1_3
    settings_ = tls_settings(load({"ssl.protocol": "TLSv1.2"}), "SSL")
    assert (settings_.min_version, settings_.max_version) == (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2)
    assert tls_settings(load({"ssl.enabled.protocols": "TLSv1.3"}), "SSL").min_version == ssl.TLSVersion.TLSv1_3


def test_iana_cipher_names_match_openssls_own_table():
    """Every TLS 1.2 suite this OpenSSL offers: our conversion of its IANA name
    gives OpenSSL's name (openssl ciphers -stdname is the reference)."""
    output = subprocess.run(
        [openssl_or_skip(), "ciphers", "-stdname", "ALL:@SECLEVEL=0"], capture_output=True, text=True, check=True
    ).stdout
    checked = 0
    for line in output.splitlines():
        parts = line.split()
        # TLS 1.2 suites (those OpenSSL labels SSLv3 or TLSv1 are usable in TLS 1.2 too),
        # not the anonymous, PSK and SRP ones no Kafka client uses.
        if len(parts) < 4 or parts[1] != "-" or parts[3] == "TLSv1.3" or re.search("anon|PSK|SRP", parts[0]):
            continue
        iana, openssl = parts[0], parts[2]
        assert openssl_cipher_name(iana) == openssl, iana
        checked += 1
    assert checked >= 10


def test_endpoint_identification_is_https_unless_set_empty():
    assert tls_settings(load({}), "SSL").endpoint_identification
    assert not tls_settings(load({"ssl.endpoint.identification.algorithm": ""}), "SSL").endpoint_identification
    assert tls_settings(load({"ssl.endpoint.identification.algorithm": "HTTPS"}), "SSL").endpoint_identification


# --------------------------------------------------------------------------- contexts


def test_server_context_from_a_pem_keystore_file_and_from_pem_strings(certs):
    config = load({"ssl.keystore.location": str(certs.server_keystore), "ssl.truststore.location": str(certs.ca), "ssl.client.auth": "required"})
    context = server_context(tls_settings(config, "SSL"))
    assert context.verify_mode == ssl.CERT_REQUIRED
    config = load(
        {
            "ssl.keystore.certificate.chain": certs.server_cert.read_text(),
            "ssl.keystore.key": certs.server_key_encrypted.read_text(),
            "ssl.key.password": KEY_PASSWORD,
            "ssl.truststore.certificates": certs.ca.read_text(),
            "ssl.client.auth": "requested",
        }
    )
    assert server_context(tls_settings(config, "SSL")).verify_mode == ssl.CERT_OPTIONAL
    client = client_context(tls_settings(load({"ssl.truststore.location": str(certs.ca)}), "SSL"))
    assert client.check_hostname and client.verify_mode == ssl.CERT_REQUIRED


def test_context_errors_name_the_key_and_never_the_material(certs, tmp_path):
    key_text = certs.server_key_encrypted.read_text()
    cases = [
        ({"ssl.keystore.location": str(tmp_path / "missing.pem")}, "ssl.keystore.location: no such file"),
        ({"ssl.keystore.location": str(certs.ca)}, "not a PEM private key with its certificate chain"),
        (
            {"ssl.keystore.certificate.chain": certs.server_cert.read_text(), "ssl.keystore.key": key_text, "ssl.key.password": "wrong"},
            "ssl.key.password does not decrypt the private key",
        ),
        (
            {"ssl.keystore.certificate.chain": certs.server_cert.read_text(), "ssl.keystore.key": key_text},
            "the private key is encrypted; set ssl.key.password",
        ),
        (
            {"ssl.keystore.location": str(certs.server_keystore), "ssl.client.auth": "required", "ssl.truststore.location": str(tmp_path / "nope")},
            "ssl.truststore.location: no such file",
        ),
        (
            {"ssl.keystore.location": str(certs.server_keystore), "ssl.client.auth": "required", "ssl.truststore.certificates": "garbage"},
            "ssl.truststore.certificates: no PEM certificates",
        ),
        ({}, "listener SSL speaks TLS but has no certificate"),
    ]
    for extra, message in cases:
        with pytest.raises(ConfigError) as error:
            server_context(tls_settings(load(extra), "SSL"))
        assert message in str(error.value), (extra, str(error.value))
        assert "BEGIN" not in str(error.value) and "wrong" not in str(error.value)


def test_start_builds_the_listeners_contexts(certs):
    # One node: nothing connects node to node, so an SSL-only broker is fine.
    assert set(_listener_tls(load({"listeners": "SSL://127.0.0.1:9092", "ssl.keystore.location": str(certs.server_keystore)}))) == {"SSL"}
    # Node-to-node TLS and SASL (their client side): tests/unit/test_node_security.py.


# --------------------------------------------------------------------------- principals

# Kafka's documentation example of ssl.principal.mapping.rules.
DOC_RULES = (
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,\n"
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,\n"
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,\n"
    "DEFAULT"
)


@pytest.mark.parametrize(
    "dn, name",
    [
        ("CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown", "serviceuser"),
        ("CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown", "adminuser@admin"),
        ("OU=Ops,CN=Some.Host", "some.host"),
        ("O=No,L=Common,C=Name", "O=No,L=Common,C=Name"),
    ],
)
def test_kafkas_documented_mapping_rules(dn, name):
    assert PrincipalMapper(DOC_RULES).name(dn) == name


def test_mapping_rule_syntax():
    assert PrincipalMapper().name("CN=a,O=b") == "CN=a,O=b"  # DEFAULT
    assert PrincipalMapper("RULE:^CN=(.*?),O=(.*)$/$2-$1/U").name("CN=a,O=b") == "B-A"
    assert PrincipalMapper("RULE:^CN=(?<user>[^,]*).*$/${user}\\$/").name("CN=bob,O=x") == "bob$"
    assert PrincipalMapper("RULE:^CN=(.*)\\/x$/$1/").name("CN=a/x") == "a"
    with pytest.raises(ValueError, match="no ssl.principal.mapping.rules rule matches"):
        PrincipalMapper("RULE:^CN=admin$/admin/").name("CN=other")
    for bad in ("FOO", "RULE:a/b", "RULE:(/x/", "RULE:a/b/Q", ""):
        with pytest.raises(ValueError):
            PrincipalMapper(bad)


def test_certificate_subjects_render_as_java_prints_them(certs, tmp_path):
    assert subject_dn(der(certs.client_cert)) == CLIENT_DN
    assert PrincipalMapper(DOC_RULES).principal(der(certs.client_cert)) == "User:client1"
    assert PrincipalMapper().principal(der(certs.client_cert)) == "User:" + CLIENT_DN
    assert PrincipalMapper().principal(None) == ANONYMOUS
    subject = "/DC=com/DC=example/O=Acme\\, Inc./CN=#x+UID=u1/emailAddress=a@b.c"
    subprocess.run(
        [openssl_or_skip(), "req", "-x509", "-new", "-key", str(certs.client_key), "-out", "odd.pem", "-days", "1",
         "-subj", subject, "-multivalue-rdn"],
        cwd=tmp_path, check=True, capture_output=True,
    )
    email = "1.2.840.113549.1.9.1=#1605" + b"a@b.c".hex()
    assert subject_dn(der(tmp_path / "odd.pem")) == f"{email},CN=\\#x+UID=u1,O=Acme\\, Inc.,DC=example,DC=com"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_bad_certificate_bytes_fail_with_protocol_error(data):
    try:
        subject_dn(data)
    except ProtocolError:
        pass


def test_truncated_certificates_fail_with_protocol_error(certs):
    data = der(certs.client_cert)
    for end in range(0, len(data), 7):
        with pytest.raises(ProtocolError):
            subject_dn(data[:end])
