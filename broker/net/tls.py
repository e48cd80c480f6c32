"""TLS for listeners and node-to-node connections, with Kafka's ``ssl.*`` keys.

What it does:

* :func:`tls_settings` reads a listener's ``ssl.*`` keys (global, overridden
  key by key by ``listener.name.<lowercase name>.ssl.*``, as Kafka does) into a
  validated :class:`TlsSettings`, refusing what cannot be honoured: Java
  keystores (JKS/PKCS12), protocols other than TLSv1.2/TLSv1.3, cipher suites
  OpenSSL does not know or Python cannot choose (TLS 1.3 suites can only be
  taken all together), Java-only plug-ins.
* :func:`server_context` / :func:`client_context` build ``ssl.SSLContext``
  objects from them; every failure (a missing file, a wrong
  ``ssl.key.password``) is a :class:`ConfigError` naming the key and never
  quoting certificate or key material.
* :func:`subject_dn` renders a certificate's subject as Java's
  ``X500Principal.getName()`` does (RFC 2253: last RDN first, RFC 2253
  keywords, other attributes as ``OID=#hex``), from the DER bytes, and
  :class:`PrincipalMapper` applies ``ssl.principal.mapping.rules``
  (``DEFAULT`` and ``RULE:pattern/replacement/[LU]``) to get the principal,
  ``User:<name>``; a peer without a certificate is ``User:ANONYMOUS``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import ssl
import tempfile
from dataclasses import dataclass

from broker.config import BrokerConfig, ConfigError
from protocol.exceptions import ProtocolError

log = logging.getLogger(__name__)

ANONYMOUS = "User:ANONYMOUS"
# How long a client has to finish its TLS handshake (Kafka has no key for it;
# asyncio's default of 60 s would let idle sockets pile up).
HANDSHAKE_TIMEOUT_S = 10.0

_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
# Keys whose values are secrets or key material: never logged, never described.
PASSWORD_KEYS = frozenset({"ssl.key.password", "ssl.keystore.password", "ssl.truststore.password", "ssl.keystore.key"})
# Java's JSSE plumbing: there is no OpenSSL counterpart to honour.
_JAVA_ONLY_KEYS = ("ssl.provider", "ssl.engine.factory.class", "ssl.secure.random.implementation")
# Java's defaults for these name the same thing OpenSSL does anyway; others cannot be honoured.
_JAVA_DEFAULTS = {"ssl.keymanager.algorithm": ("SunX509", "PKIX"), "ssl.trustmanager.algorithm": ("PKIX", "SunX509")}


@dataclass(frozen=True)
class TlsSettings:
    """One listener's validated TLS settings (no file has been read yet)."""

    listener: str
    # (key naming it, value): a PEM file, or PEM strings of the chain and the key.
    keystore_location: str | None = None
    keystore_chain_pem: str | None = None
    keystore_key_pem: str | None = None
    key_password: str | None = None
    truststore_location: str | None = None
    truststore_pem: str | None = None
    client_auth: str = "none"
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    max_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3
    openssl_ciphers: str | None = None
    endpoint_identification: bool = True
    principal_rules: str = "DEFAULT"

    def __repr__(self) -> str:  # never the key material or the password
        return f"TlsSettings(listener={self.listener}, client_auth={self.client_auth})"

    @property
    def has_keystore(self) -> bool:
        return self.keystore_location is not None or self.keystore_chain_pem is not None


def _key(listener: str, name: str, raw: dict[str, str]) -> str:
    """The key to name in a message: the listener-prefixed one when that was set."""
    prefixed = f"listener.name.{listener.lower()}.{name}"
    return prefixed if prefixed in raw else name


def tls_settings(config: BrokerConfig, listener: str) -> TlsSettings:
    """The TLS settings of ``listener`` (a name from listeners or controller.listener.names)."""
    raw = config.ssl
    values = config.ssl_settings(listener)

    def get(name: str) -> str | None:
        value = values.get(name)
        return None if value is None or value.strip() == "" else value.strip()

    def fail(name: str, message: str) -> ConfigError:
        return ConfigError(f"{_key(listener, name, raw)}: {message}")

    for name in _JAVA_ONLY_KEYS:
        if get(name) is not None:
            raise fail(name, "a Java (JSSE) plug-in setting pybroker cannot honour; remove it")
    for name, accepted in _JAVA_DEFAULTS.items():
        if get(name) is not None and get(name) not in accepted:
            raise fail(name, f"only Java's defaults ({', '.join(accepted)}) can be honoured; remove it")
    for name in ("ssl.keystore.type", "ssl.truststore.type"):
        kind = (get(name) or "PEM").upper()
        if kind != "PEM":
            raise fail(
                name,
                f"{kind} is a Java keystore format pybroker cannot read; convert it to PEM "
                "(e.g. openssl pkcs12 -in store.p12 -nodes) and set it to PEM",
            )
    for name, use in (("ssl.keystore.password", "ssl.key.password"), ("ssl.truststore.password", None)):
        if get(name) is not None:
            advice = f"set {use} for an encrypted key instead" if use else "remove it (PEM trust stores have no password)"
            raise fail(name, f"not used with PEM files; {advice}")
    location, chain, key = get("ssl.keystore.location"), get("ssl.keystore.certificate.chain"), get("ssl.keystore.key")
    if location is not None and (chain is not None or key is not None):
        raise fail("ssl.keystore.location", "set either it or ssl.keystore.certificate.chain with ssl.keystore.key, not both")
    if (chain is None) != (key is None):
        raise fail("ssl.keystore.certificate.chain", "needs ssl.keystore.key too (and the other way round)")
    trust_location, trust_pem = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    if trust_location is not None and trust_pem is not None:
        raise fail("ssl.truststore.location", "set either it or ssl.truststore.certificates, not both")
    client_auth = (get("ssl.client.auth") or "none").lower()
    if client_auth not in ("none", "requested", "required"):
        raise fail("ssl.client.auth", f"expected none, requested or required, got {client_auth!r}")
    min_version, max_version = _versions(get("ssl.enabled.protocols"), get("ssl.protocol"), lambda m: fail("ssl.enabled.protocols", m))
    ciphers = get("ssl.cipher.suites")
    openssl_ciphers = None
    if ciphers is not None:
        openssl_ciphers, with_tls13 = _openssl_ciphers(ciphers, lambda m: fail("ssl.cipher.suites", m))
        if not with_tls13:
            # Java would offer no TLS 1.3 suite at all, so TLS 1.3 cannot be agreed.
            max_version = ssl.TLSVersion.TLSv1_2
        if openssl_ciphers is None and max_version < ssl.TLSVersion.TLSv1_3:
            raise fail("ssl.cipher.suites", "names only TLS 1.3 suites but TLSv1.3 is not enabled")
        if min_version > max_version:
            raise fail("ssl.cipher.suites", "names no TLS 1.3 suite, but only TLSv1.3 is enabled")
    algorithm = get("ssl.endpoint.identification.algorithm")
    if algorithm is not None and algorithm.lower() != "https":
        raise fail("ssl.endpoint.identification.algorithm", f"expected https or empty, got {algorithm!r}")
    # Unset: Kafka's default, https. Set to empty: host names are not checked.
    endpoint_identification = algorithm is not None or values.get("ssl.endpoint.identification.algorithm") is None
    rules = get("ssl.principal.mapping.rules") or "DEFAULT"
    try:
        PrincipalMapper(rules)
    except ValueError as exc:
        raise fail("ssl.principal.mapping.rules", str(exc)) from None
    return TlsSettings(
        listener=listener,
        keystore_location=location,
        keystore_chain_pem=chain,
        keystore_key_pem=key,
        key_password=values.get("ssl.key.password") or None,
        truststore_location=trust_location,
        truststore_pem=trust_pem,
        client_auth=client_auth,
        min_version=min_version,
        max_version=max_version,
        openssl_ciphers=openssl_ciphers,
        endpoint_identification=endpoint_identification,
        principal_rules=rules,
    )


def _versions(enabled: str | None, protocol: str | None, fail) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    names = [n.strip() for n in (enabled or "TLSv1.2,TLSv1.3").split(",") if n.strip()]
    unknown = [n for n in names if n not in _PROTOCOLS]
    if unknown or not names:
        raise fail(f"only TLSv1.2 and TLSv1.3 can be enabled, not {', '.join(unknown) or 'none'}")
    versions = sorted(_PROTOCOLS[n] for n in names)
    if protocol is not None:
        if protocol not in ("TLS", "TLSv1.2", "TLSv1.3"):
            raise ConfigError(f"ssl.protocol: expected TLS, TLSv1.2 or TLSv1.3, got {protocol!r}")
        if protocol == "TLSv1.2":
            # Java's TLSv1.2 context cannot speak TLS 1.3, whatever is enabled.
            versions = [v for v in versions if v <= ssl.TLSVersion.TLSv1_2]
            if not versions:
                raise ConfigError("ssl.protocol: TLSv1.2 cannot speak the only enabled protocol, TLSv1.3")
    return versions[0], versions[-1]


# IANA (Java) key exchange and authentication names -> OpenSSL's cipher name prefix.
_KX = {
    "RSA": "",
    "ECDHE_RSA": "ECDHE-RSA-",
    "ECDHE_ECDSA": "ECDHE-ECDSA-",
    "DHE_RSA": "DHE-RSA-",
    "DHE_DSS": "DHE-DSS-",
}


def openssl_cipher_name(iana_name: str) -> str | None:
    """OpenSSL's name of a TLS 1.2 cipher suite given by its IANA (Java) name, e.g.
    TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 -> ECDHE-RSA-AES128-GCM-SHA256; None
    when the name does not follow the pattern OpenSSL's names are derived by."""
    match = re.fullmatch(r"(?:TLS|SSL)_([A-Z0-9_]+?)_WITH_([A-Z0-9_]+)", iana_name.strip())
    if not match or match.group(1) not in _KX:
        return None
    cipher = match.group(2)
    cipher = re.sub(r"^(AES|ARIA|CAMELLIA)_(\d+)", r"\1\2", cipher)
    # OpenSSL drops CBC from the names of CBC suites, and the MAC of AEAD suites
    # whose hash only names the PRF (CHACHA20_POLY1305_SHA256 -> CHACHA20-POLY1305).
    cipher = cipher.replace("_CBC_", "_").replace("CHACHA20_POLY1305_SHA256", "CHACHA20_POLY1305")
    cipher = cipher.replace("CCM_8", "CCM8")
    prefix = _KX[match.group(1)]
    if prefix == "ECDHE-RSA-" and cipher.startswith("ARIA"):
        prefix = "ECDHE-"  # OpenSSL's one irregular name among these key exchanges
    return prefix + cipher.replace("_", "-")


def _openssl_ciphers(value: str, fail) -> tuple[str | None, bool]:
    """ssl.cipher.suites (IANA names) -> an OpenSSL cipher string for TLS 1.2 (None
    when only TLS 1.3 suites are named) and whether TLS 1.3 suites are named."""
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    probe.set_ciphers("ALL:@SECLEVEL=0")
    available = {c["name"]: c["protocol"] for c in probe.get_ciphers()}
    tls13 = {name for name, protocol in available.items() if protocol == "TLSv1.3"}
    named13, named12 = set(), []
    for name in (n.strip() for n in value.split(",")):
        if not name:
            continue
        if name in tls13:
            named13.add(name)
            continue
        converted = openssl_cipher_name(name) or name
        if available.get(converted, "TLSv1.3") == "TLSv1.3":
            raise fail(
                f"{name} is not a cipher suite this OpenSSL ({ssl.OPENSSL_VERSION}) offers "
                "(anonymous, PSK and SRP suites are not mapped)"
            )
        named12.append(converted)
    if named13 and named13 != tls13:
        raise fail(
            "TLS 1.3 suites cannot be chosen one by one from Python: name all of "
            f"{', '.join(sorted(tls13))} or none (none disables TLS 1.3)"
        )
    return (":".join(named12) if named12 else None), bool(named13)


# ----------------------------------------------------------------------------- contexts


def _load_keystore(context: ssl.SSLContext, settings: TlsSettings) -> None:
    prompted = []

    def password() -> str:
        # Without this callable OpenSSL would prompt on the terminal for an encrypted key.
        prompted.append(True)
        return settings.key_password or ""

    name = "ssl.keystore.location" if settings.keystore_location else "ssl.keystore.certificate.chain/ssl.keystore.key"
    where = f"listener {settings.listener}, {name}"
    try:
        if settings.keystore_location is not None:
            context.load_cert_chain(settings.keystore_location, password=password)
        else:
            # OpenSSL loads chains and keys from files only: a private file, gone at once.
            with tempfile.TemporaryDirectory(prefix="pybroker-tls-") as directory:
                path = os.path.join(directory, "keystore.pem")
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(descriptor, "w") as file:
                    file.write(settings.keystore_chain_pem.strip() + "\n" + settings.keystore_key_pem.strip() + "\n")
                context.load_cert_chain(path, password=password)
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file {settings.keystore_location}") from None
    except PermissionError:
        raise ConfigError(f"{where}: cannot read {settings.keystore_location} (permission denied)") from None
    except ssl.SSLError:
        if prompted and settings.key_password is None:
            raise ConfigError(f"{where}: the private key is encrypted; set ssl.key.password") from None
        if prompted:
            raise ConfigError(f"{where}: ssl.key.password does not decrypt the private key") from None
        raise ConfigError(
            f"{where}: not a PEM private key with its certificate chain (or the key does not match the certificate)"
        ) from None


def _load_truststore(context: ssl.SSLContext, settings: TlsSettings, purpose: ssl.Purpose) -> None:
    where = f"listener {settings.listener}"
    try:
        if settings.truststore_location is not None:
            context.load_verify_locations(cafile=settings.truststore_location)
        elif settings.truststore_pem is not None:
            context.load_verify_locations(cadata=settings.truststore_pem)
        else:
            context.load_default_certs(purpose)  # as Java falls back on its own trust store
    except FileNotFoundError:
        raise ConfigError(f"{where}, ssl.truststore.location: no such file {settings.truststore_location}") from None
    except PermissionError:
        raise ConfigError(f"{where}, ssl.truststore.location: cannot read {settings.truststore_location}") from None
    except ssl.SSLError:
        key = "ssl.truststore.location" if settings.truststore_location else "ssl.truststore.certificates"
        raise ConfigError(f"{where}, {key}: no PEM certificates in it") from None


def _base_context(purpose: int, settings: TlsSettings) -> ssl.SSLContext:
    context = ssl.SSLContext(purpose)
    context.minimum_version = settings.min_version
    context.maximum_version = settings.max_version
    if settings.openssl_ciphers is not None:
        context.set_ciphers(settings.openssl_ciphers)
    context.options |= ssl.OP_NO_COMPRESSION | getattr(ssl, "OP_NO_RENEGOTIATION", 0)
    return context


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """The context a TLS listener accepts connections with."""
    if not settings.has_keystore:
        raise ConfigError(
            f"listener {settings.listener} speaks TLS but has no certificate: set ssl.keystore.location "
            "(or ssl.keystore.certificate.chain and ssl.keystore.key)"
        )
    context = _base_context(ssl.PROTOCOL_TLS_SERVER, settings)
    _load_keystore(context, settings)
    context.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}[settings.client_auth]
    if settings.client_auth != "none":
        _load_truststore(context, settings, ssl.Purpose.CLIENT_AUTH)
    return context


def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """The context this node connects to ``settings.listener`` of other nodes with:
    the peer's certificate is always verified, its host name unless
    ssl.endpoint.identification.algorithm is empty; our own certificate is shown
    when a keystore is set (for listeners requiring client auth)."""
    context = _base_context(ssl.PROTOCOL_TLS_CLIENT, settings)
    context.check_hostname = settings.endpoint_identification
    context.verify_mode = ssl.CERT_REQUIRED
    _load_truststore(context, settings, ssl.Purpose.SERVER_AUTH)
    if settings.has_keystore:
        _load_keystore(context, settings)
    return context


# ----------------------------------------------------------------------------- principals

# RFC 2253's keywords, which Java prints by name; every other attribute is OID=#hex.
_RFC2253_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
# DER string types and how their bytes decode.
_STRING_TYPES = {0x0C: "utf-8", 0x13: "latin-1", 0x14: "latin-1", 0x16: "latin-1", 0x1E: "utf-16-be", 0x1C: "utf-32-be"}
_DER_DEPTH_MAX = 8


def _der(data: bytes, offset: int, end: int) -> tuple[int, int, int]:
    """(tag, start of content, end of content) of the DER element at ``offset``."""
    if offset + 2 > end:
        raise ProtocolError("truncated DER element")
    tag, first = data[offset], data[offset + 1]
    offset += 2
    if first < 0x80:
        length = first
    else:
        count = first & 0x7F
        if count == 0 or count > 4 or offset + count > end:
            raise ProtocolError("bad DER length")
        length = int.from_bytes(data[offset : offset + count], "big")
        offset += count
    if offset + length > end:
        raise ProtocolError("DER element longer than its container")
    return tag, offset, offset + length


def _children(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(tag, element start, content start, content end) of each element in [start, end)."""
    items = []
    offset = start
    while offset < end:  # bounded: every element advances by at least 2 bytes
        tag, content, stop = _der(data, offset, end)
        items.append((tag, offset, content, stop))
        offset = stop
    return items


def _oid(raw: bytes) -> str:
    if not raw:
        raise ProtocolError("empty OID")
    parts, value = [], 0
    for byte in raw:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            parts.append(value)
            value = 0
    if raw[-1] & 0x80:
        raise ProtocolError("truncated OID")
    first = parts[0]
    head = [min(first // 40, 2), first - 40 * min(first // 40, 2)]
    return ".".join(str(p) for p in head + parts[1:])


def _escape(value: str) -> str:
    escaped = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if escaped.startswith(("#", " ")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped


def subject_dn(certificate_der: bytes) -> str:
    """The subject of a DER certificate as Java's X500Principal.getName() prints it."""
    data = bytes(certificate_der)
    (cert_tag, _, cert_start, cert_end), *_ = _children(data, 0, len(data)) or [(0, 0, 0, 0)]
    if cert_tag != 0x30:
        raise ProtocolError("not a DER certificate")
    tbs = _children(data, cert_start, cert_end)
    if not tbs or tbs[0][0] != 0x30:
        raise ProtocolError("certificate without tbsCertificate")
    fields = _children(data, tbs[0][2], tbs[0][3])
    if fields and fields[0][0] == 0xA0:  # [0] version
        fields = fields[1:]
    # serialNumber, signature, issuer, validity, subject
    if len(fields) < 5 or fields[4][0] != 0x30:
        raise ProtocolError("certificate without a subject")
    rdns = []
    for set_tag, _, set_start, set_end in _children(data, fields[4][2], fields[4][3]):
        if set_tag != 0x31:
            raise ProtocolError("subject RDN is not a SET")
        avas = []
        for ava_tag, _, ava_start, ava_end in _children(data, set_start, set_end):
            parts = _children(data, ava_start, ava_end) if ava_tag == 0x30 else []
            if len(parts) != 2 or parts[0][0] != 0x06:
                raise ProtocolError("bad subject attribute")
            oid = _oid(data[parts[0][2] : parts[0][3]])
            value_tag, value_start, value_content, value_end = parts[1]
            keyword = _RFC2253_KEYWORDS.get(oid)
            if keyword is not None and value_tag in _STRING_TYPES:
                try:
                    text = data[value_content:value_end].decode(_STRING_TYPES[value_tag])
                except UnicodeDecodeError:
                    raise ProtocolError("undecodable subject attribute") from None
                avas.append(f"{keyword}={_escape(text)}")
            else:
                avas.append(f"{keyword or oid}=#{data[value_start:value_end].hex()}")
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))


class PrincipalMapper:
    """ssl.principal.mapping.rules: rules tried in order, the first whose pattern
    matches the whole DN gives the name (its replacement, Java's ``$1`` and
    ``${name}`` syntax, then lower- or upper-cased for ``/L`` or ``/U``);
    ``DEFAULT`` gives the DN itself. No matching rule: :meth:`name` raises
    ValueError and the connection is refused, as Kafka refuses it."""

    _RULE = re.compile(r"RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)")
    RULES_MAX = 1000

    def __init__(self, rules: str = "DEFAULT"):
        self.rules: list[tuple[re.Pattern, str, str] | None] = []
        text, position = rules, 0
        while position < len(text):
            if len(self.rules) >= self.RULES_MAX:
                raise ValueError(f"more than {self.RULES_MAX} rules")
            while position < len(text) and text[position] in " \t\r\n,":
                position += 1
            if position == len(text):
                break
            if text.startswith("DEFAULT", position):
                self.rules.append(None)
                position += len("DEFAULT")
            else:
                match = self._RULE.match(text, position)
                if match is None:
                    raise ValueError(f"invalid rule at {text[position:position + 40]!r}: expected DEFAULT or RULE:pattern/replacement/[LU]")
                try:
                    # Java names groups (?<name>...), Python (?P<name>...).
                    pattern = re.compile(re.sub(r"\(\?<(?=[A-Za-z])", "(?P<", match.group(1)))
                except re.error as exc:
                    raise ValueError(f"invalid pattern {match.group(1)!r}: {exc}") from None
                self.rules.append((pattern, match.group(2), match.group(3)))
                position = match.end()
            rest = re.compile(r"[ \t]*(?:[,\n]|$)").match(text, position)
            if rest is None:
                raise ValueError(f"unexpected text after a rule: {text[position:position + 40]!r}")
            position = rest.end()
        if not self.rules:
            raise ValueError("no rules")

    def name(self, dn: str) -> str:
        for rule in self.rules:
            if rule is None:
                return dn
            pattern, replacement, case = rule
            if pattern.fullmatch(dn):
                result = pattern.sub(lambda m, r=replacement: _java_replacement(m, r), dn)
                return result.lower() if case == "L" else result.upper() if case == "U" else result
        raise ValueError(f"no ssl.principal.mapping.rules rule matches {dn!r}")

    def principal(self, certificate_der: bytes | None) -> str:
        """``User:<name>`` of a peer certificate, ANONYMOUS without one."""
        if not certificate_der:
            return ANONYMOUS
        return "User:" + self.name(subject_dn(certificate_der))


def _java_replacement(match: re.Match, replacement: str) -> str:
    """Java's Matcher replacement syntax: $n, ${name}, backslash escapes."""
    out, i = [], 0
    while i < len(replacement):  # bounded: i advances every round
        c = replacement[i]
        if c == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
        elif c == "$":
            named = re.compile(r"\{(\w+)\}").match(replacement, i + 1)
            number = re.compile(r"\d").match(replacement, i + 1)
            if named:
                out.append(match.group(named.group(1)) or "")
                i = named.end()
            elif number:
                # Java takes more digits while they still name a group.
                group, j = int(number.group()), number.end()
                while j < len(replacement) and replacement[j].isdigit() and group * 10 + int(replacement[j]) <= pattern_groups(match):
                    group, j = group * 10 + int(replacement[j]), j + 1
                if group > pattern_groups(match):
                    raise ValueError(f"no group {group} in the rule's pattern")
                out.append(match.group(group) or "")
                i = j
            else:
                raise ValueError("a $ in a replacement must name a group")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def pattern_groups(match: re.Match) -> int:
    return match.re.groups


def peer_principal(ssl_object, mapper: PrincipalMapper) -> str:
    """The principal of a finished handshake's peer."""
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    return mapper.principal(der)


# ----------------------------------------------------------------- accepting TLS connections


def _handshake_failure(exc: BaseException | None, protocol: str = "SSL") -> str:
    reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
    if isinstance(exc, ConnectionAbortedError) and "longer than" in str(exc):
        return f"no TLS handshake within {HANDSHAKE_TIMEOUT_S:g} s"
    if reason in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNKNOWN_PROTOCOL", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"):
        return (f"TLS handshake failed ({reason}): a client not speaking TLS? The first bytes were not a TLS "
                f"handshake; the listener's security protocol is {protocol}, the client may be using PLAINTEXT or "
                "SASL_PLAINTEXT")
    return f"TLS handshake failed ({reason})"


class TLSAcceptor(asyncio.Protocol):
    """The first protocol of a connection on a TLS listener: it puts the event
    loop's own TLS layer (asyncio's or uvloop's SSLProtocol, as
    ``loop.start_tls`` would) between the socket and a KafkaConnection before
    any byte is read, and logs a failed handshake once, with the peer."""

    __slots__ = ("_connection", "_context", "_peer", "_waiter")

    def __init__(self, connection, context: ssl.SSLContext):
        self._connection = connection
        self._context = context
        self._peer = "?"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        loop = asyncio.get_running_loop()
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        waiter = loop.create_future()
        waiter.add_done_callback(self._handshake_done)
        tls = _ssl_protocol_class(loop)(
            loop, self._connection, self._context, waiter, server_side=True, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S
        )
        # Synchronously, before the loop reads the socket: every byte goes through TLS.
        transport.set_protocol(tls)
        tls.connection_made(transport)

    def _handshake_done(self, waiter: asyncio.Future) -> None:
        exc = None if waiter.cancelled() else waiter.exception()
        if exc is not None:
            # The reason is OpenSSL's; nothing of a certificate is logged.
            protocol = "SASL_SSL" if self._connection.sasl_enabled else "SSL"
            log.warning(
                "closing %s on TLS listener %s: %s", self._peer, self._connection.listener_name,
                _handshake_failure(exc, protocol),
            )
        self._connection = None

    def connection_lost(self, exc: Exception | None) -> None:
        pass  # only before connection_made; afterwards the TLS layer owns the socket

    def data_received(self, data: bytes) -> None:
        pass  # never: the TLS layer takes the socket in connection_made


def _ssl_protocol_class(loop):
    """The loop's own TLS protocol: uvloop's is part of its loop, asyncio's of its module."""
    module = type(loop).__module__
    if module.startswith("uvloop"):
        import uvloop.loop

        return uvloop.loop.SSLProtocol
    import asyncio.sslproto

    return asyncio.sslproto.SSLProtocol
