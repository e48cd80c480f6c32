"""OAUTHBEARER tokens verified against a JWKS (Kafka's OAuthBearerValidatorCallbackHandler, KIP-768).

A listener whose ``listener.name.<l>.oauthbearer.sasl.server.callback.handler.class``
names Kafka's validator (``VALIDATOR_CLASSES``, the 3.x ``secured.`` name too)
validates tokens with :class:`JwksValidator` instead of the unsecured default:

- the token is a signed JWS; ``alg`` must be one of ``ALGORITHMS`` (RSA,
  RSA-PSS and ECDSA: ``none`` and the HMAC algorithms are refused, so an
  unsigned token or a public key used as an HMAC secret never passes);
- the key is the JWKS key whose ``kid`` is the header's (without a ``kid``, the
  one key that fits the algorithm), of the algorithm's key type (and curve),
  with ``use`` absent or ``sig`` and ``alg`` absent or the header's;
- the signature, ``aud`` (one of ``sasl.oauthbearer.expected.audience`` when
  set) and ``iss`` (``sasl.oauthbearer.expected.issuer`` when set) are checked
  by PyJWT (with the ``cryptography`` package): verification is a well-kept
  library's job, not ours;
- ``exp`` and ``iat`` are required, ``nbf`` honoured, each with
  ``sasl.oauthbearer.clock.skew.seconds`` (30) of slack; the principal is the
  ``sasl.oauthbearer.sub.claim.name`` claim (``sub``), non-blank; the scope the
  ``sasl.oauthbearer.scope.claim.name`` claim (``scope``, a string or a list).

Keys (:class:`JwksKeyCache`): ``sasl.oauthbearer.jwks.endpoint.url`` is an
``https://`` or ``file://`` URL. It is read once at start-up, before any
listener is bound (a failure stops the start, as Kafka's "Could not refresh
JWKS"), then again every ``sasl.oauthbearer.jwks.endpoint.refresh.ms`` on a
thread of its own, so no fetch ever runs on the event loop; a failed fetch is
retried with exponential backoff from ``...retry.backoff.ms`` up to
``...retry.backoff.max.ms`` in all, and the old keys are kept meanwhile. A
token naming an unknown ``kid`` is refused, and asks the thread for an early
refresh, once per kid per minute (at most 16 kids remembered, kids longer than
1000 characters ignored), as Kafka's RefreshingHttpsJwks, and early fetches
start at least a second apart: a client retrying
after a key rotation gets in once the new key is fetched. ``file://`` is read
on the same schedule (Kafka reads it once). For ``https://``, the listener's
OAUTHBEARER JAAS entry may give ``ssl.truststore.location`` (a PEM file) or
``ssl.truststore.certificates`` (PEM text), else the system's CAs are trusted.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import jwt

from broker.security.oauthbearer_server import OAuthBearerToken, TokenValidationError, _number, _scope, _seconds_to_ms

log = logging.getLogger(__name__)

VALIDATOR_CLASSES = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler",
)
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
_EC_CURVES = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}
JWKS_BYTES_MAX = 1 << 20  # a provider's JWKS is a few KiB
JWKS_KEYS_MAX = 1000
FETCH_TIMEOUT_S = 10.0
# Kafka's RefreshingHttpsJwks: an unknown kid asks for a refresh at most this often...
MISSING_KID_RETRY_MS = 60_000
MISSING_KID_ENTRIES_MAX = 16  # ... for this many kids at once,
KID_CHARS_MAX = 1000  # and a longer kid is taken for a malformed token.
# However many new kids arrive, early fetches start at least this far apart,
# so a flood of made-up kids cannot turn into a flood of requests to the provider.
EXPEDITED_GAP_MS = 1000


class JwksError(Exception):
    """The JWKS could not be fetched or read."""


@dataclass(frozen=True)
class JwksSettings:
    url: str
    refresh_ms: int = 3_600_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 10_000
    expected_audience: tuple[str, ...] = ()
    expected_issuer: str | None = None
    scope_claim_name: str = "scope"
    sub_claim_name: str = "sub"
    clock_skew_seconds: int = 30


def check_url(url: str) -> str:
    """``url`` if it is an https:// or file:// URL, else ValueError."""
    parsed = urllib.parse.urlparse(url.strip())
    if parsed.scheme == "https" and parsed.netloc:
        return url.strip()
    if parsed.scheme == "file" and parsed.path:
        return url.strip()
    raise ValueError(f"{url!r} is not an https:// or file:// URL")


def fetch_jwks(url: str, ssl_context: ssl.SSLContext | None, timeout_s: float = FETCH_TIMEOUT_S) -> bytes:
    """The JWKS document's bytes (at most JWKS_BYTES_MAX); JwksError otherwise. Blocking: call off the loop."""
    parsed = urllib.parse.urlparse(url)
    try:
        if parsed.scheme == "file":
            with open(urllib.parse.unquote(parsed.path), "rb") as file:
                data = file.read(JWKS_BYTES_MAX + 1)
        else:
            request = urllib.request.Request(url, headers={"Accept": "application/json"})
            with urllib.request.urlopen(request, timeout=timeout_s, context=ssl_context) as response:
                data = response.read(JWKS_BYTES_MAX + 1)
    except urllib.error.HTTPError as exc:
        raise JwksError(f"answered HTTP {exc.code}") from None
    except (OSError, ValueError) as exc:
        raise JwksError(f"could not be read: {getattr(exc, 'reason', None) or exc}") from None
    if len(data) > JWKS_BYTES_MAX:
        raise JwksError(f"holds more than {JWKS_BYTES_MAX} bytes")
    return data


def parse_jwks(data: bytes) -> list[tuple[Mapping, jwt.PyJWK]]:
    """The usable signature keys of a JWKS document as (JWK fields, key); JwksError when none is."""
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise JwksError(f"not JSON: {exc}") from None
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise JwksError("not a JWKS (no 'keys' list)")
    keys = []
    for entry in entries[:JWKS_KEYS_MAX]:
        if not isinstance(entry, dict) or entry.get("kty") not in ("RSA", "EC") or entry.get("use", "sig") != "sig":
            continue  # symmetric, encryption and unknown keys never verify a token here
        try:
            keys.append((entry, jwt.PyJWK(entry)))
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError) as exc:
            log.warning("JWKS: key %r skipped: %s", entry.get("kid"), exc)
    if not keys:
        raise JwksError("no usable RSA or EC signature key")
    return keys


def _fits(entry: Mapping, alg: str) -> bool:
    if entry.get("alg") not in (None, alg):
        return False
    if alg.startswith("ES"):
        return entry.get("kty") == "EC" and entry.get("crv") == _EC_CURVES[alg]
    return entry.get("kty") == "RSA"


class JwksKeyCache:
    """The JWKS keys, fetched at start and refreshed by a thread of its own; see the module docstring."""

    def __init__(
        self,
        settings: JwksSettings,
        ssl_context: ssl.SSLContext | None = None,
        *,
        fetch: Callable[[str, ssl.SSLContext | None], bytes] = fetch_jwks,
        clock_ms: Callable[[], int] = lambda: int(time.monotonic() * 1000),
    ):
        self.settings = settings
        self._ssl_context = ssl_context
        self._fetch = fetch
        self._clock_ms = clock_ms
        self._keys: list[tuple[Mapping, jwt.PyJWK]] = []  # replaced whole, never changed in place
        self._lock = threading.Lock()
        self._missing: OrderedDict[str, int] = OrderedDict()  # kid -> when it may ask again
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_fetch_ms = 0
        self.refreshes = 0  # successful fetches, for tests and logs

    def load(self) -> None:
        """The first fetch (blocking, with retries): JwksError when no keys could be had."""
        self._keys = self._fetch_with_retries()
        self.refreshes += 1
        log.info("JWKS: %d keys from %s", len(self._keys), self.settings.url)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="jwks refresh", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(FETCH_TIMEOUT_S + 1)

    def _fetch_with_retries(self) -> list:
        """Kafka's Retry: backoff doubling from retry.backoff.ms, until retry.backoff.max.ms have passed."""
        self._last_fetch_ms = self._clock_ms()
        deadline = self._clock_ms() + self.settings.retry_backoff_max_ms
        wait_ms = max(self.settings.retry_backoff_ms, 1)
        while True:
            try:
                return parse_jwks(self._fetch(self.settings.url, self._ssl_context))
            except JwksError as exc:
                left_ms = deadline - self._clock_ms()
                if left_ms <= 0 or self._stop.is_set():
                    raise JwksError(f"{self.settings.url}: {exc}") from None
                self._stop.wait(min(wait_ms, left_ms) / 1000)
                wait_ms *= 2

    def refresh(self) -> None:
        try:
            keys = self._fetch_with_retries()
        except JwksError as exc:
            log.warning("JWKS: refresh failed, keeping the %d keys held: %s", len(self._keys), exc)
            return
        with self._lock:
            self._keys = keys
            for entry, _ in keys:
                self._missing.pop(entry.get("kid"), None)
        self.refreshes += 1
        log.info("JWKS: refreshed, %d keys from %s", len(keys), self.settings.url)

    def _run(self) -> None:
        while not self._stop.is_set():
            expedited = self._wake.wait(self.settings.refresh_ms / 1000)
            if self._stop.is_set():
                return
            self._wake.clear()
            if expedited:
                gap_ms = self._last_fetch_ms + EXPEDITED_GAP_MS - self._clock_ms()
                if gap_ms > 0 and self._stop.wait(gap_ms / 1000):
                    return
            self.refresh()

    def key_for(self, kid, alg: str):
        """The key to verify a token of ``alg`` and ``kid`` with; TokenValidationError without one."""
        keys = self._keys
        if kid is None:
            fitting = [key for entry, key in keys if _fits(entry, alg)]
            if len(fitting) != 1:
                raise TokenValidationError(f"the token has no kid and the JWKS has {len(fitting)} {alg} keys")
            return fitting[0]
        if not isinstance(kid, str):
            raise TokenValidationError("the token's kid is not a string")
        found = [(entry, key) for entry, key in keys if entry.get("kid") == kid]
        if not found:
            asked = self._expedite(kid)
            raise TokenValidationError(
                f"no key with kid {kid[:100]!r} in the JWKS" + ("; refreshing it" if asked else "")
            )
        for entry, key in found:
            if _fits(entry, alg):
                return key
        raise TokenValidationError(f"the JWKS key {kid[:100]!r} is not for {alg}")

    def _expedite(self, kid: str) -> bool:
        if len(kid) > KID_CHARS_MAX:
            return False
        now_ms = self._clock_ms()
        with self._lock:
            next_ms = self._missing.get(kid)
            if next_ms is not None and next_ms > now_ms:
                return False
            self._missing[kid] = now_ms + MISSING_KID_RETRY_MS
            self._missing.move_to_end(kid)
            while len(self._missing) > MISSING_KID_ENTRIES_MAX:
                self._missing.popitem(last=False)
        self._wake.set()
        return True


class JwksValidator:
    """A token validator (``(token, now_ms) -> OAuthBearerToken``) over a :class:`JwksKeyCache`."""

    def __init__(self, keys: JwksKeyCache):
        self.keys = keys
        self.settings = keys.settings

    def close(self) -> None:
        self.keys.close()

    def __call__(self, token: str, now_ms: int) -> OAuthBearerToken:
        settings = self.settings
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:
            raise TokenValidationError(f"Could not validate the access token: malformed JWT ({exc})") from None
        alg = header.get("alg")
        if alg == "none" or not alg:
            raise TokenValidationError("Could not validate the access token: it is unsigned (alg none)")
        if alg not in ALGORITHMS:
            raise TokenValidationError(f"Could not validate the access token: algorithm {str(alg)[:20]!r} is not accepted")
        key = self.keys.key_for(header.get("kid"), alg)
        try:
            claims = jwt.decode(
                token,
                key.key,  # the public key itself: the header's alg (checked above) picks the verifier
                algorithms=[alg],
                audience=list(settings.expected_audience) or None,
                issuer=settings.expected_issuer,
                # Times are checked below against the session's clock (now_ms).
                options={
                    "verify_signature": True,
                    "verify_aud": bool(settings.expected_audience),
                    "verify_iss": settings.expected_issuer is not None,
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                    "require": ["exp", "iat"],
                },
            )
        except jwt.InvalidTokenError as exc:
            raise TokenValidationError(f"Could not validate the access token: {exc}") from None
        skew_ms = settings.clock_skew_seconds * 1000
        expiration = _number(claims, "exp")
        issued_at = _number(claims, "iat")
        not_before = _number(claims, "nbf")
        if now_ms - skew_ms >= expiration * 1000:
            raise TokenValidationError(f"Could not validate the access token: it expired at {expiration} s")
        if not_before is not None and now_ms + skew_ms < not_before * 1000:
            raise TokenValidationError(f"Could not validate the access token: not valid before {not_before} s")
        if issued_at * 1000 > now_ms + skew_ms:
            raise TokenValidationError(f"Could not validate the access token: issued in the future ({issued_at} s)")
        principal = claims.get(settings.sub_claim_name)
        if not isinstance(principal, str) or not principal.strip():
            raise TokenValidationError(
                f"Could not validate the access token: no principal in claim {settings.sub_claim_name!r}"
            )
        return OAuthBearerToken(
            value=token,
            principal_name=principal,
            lifetime_ms=_seconds_to_ms(expiration),
            scope=_scope(claims, settings.scope_claim_name),
            start_time_ms=_seconds_to_ms(issued_at),
            claims=claims,
        )


def truststore_context(options: Mapping[str, str]) -> ssl.SSLContext:
    """The TLS context for an https:// JWKS URL from the OAUTHBEARER JAAS entry's ``ssl.*`` options."""
    kind = (options.get("ssl.truststore.type") or "PEM").strip().upper()
    if kind != "PEM":
        raise ValueError(f"ssl.truststore.type {kind} is not supported (PEM only)")
    location = (options.get("ssl.truststore.location") or "").strip()
    certificates = (options.get("ssl.truststore.certificates") or "").strip()
    try:
        if location:
            context = ssl.create_default_context(cafile=location)
        elif certificates:
            context = ssl.create_default_context(cadata=certificates)
        else:
            context = ssl.create_default_context()
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"ssl.truststore: {exc}") from None
    if (options.get("ssl.endpoint.identification.algorithm", "https") or "").strip() == "":
        context.check_hostname = False
    return context
