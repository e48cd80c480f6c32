"""Authentication for SASL listeners (pure state machines, wired by
broker/net/sasl_listener.py), the authorizer's questions, and the JWKS keys
OAUTHBEARER tokens are checked against.

The SASL modules below are pure, and each says so in its own docstring, which
the layering test holds them to: no asyncio, no sockets, no clock of their
own. ``jwks`` is not: it fetches key sets over HTTPS on its own thread. Time comes in as ``now_ms`` arguments and randomness from ``secrets``, so
the connection layer decides when frames arrive and what to send, and the
tests drive every exchange byte by byte.

- ``mechanism``: the failure exception and the interface each mechanism serves;
- ``scram_server``: SCRAM-SHA-256/512 (RFC 5802, 7677), Kafka's delegation tokens;
- ``plain_server``: PLAIN (RFC 4616) over users of a JAAS config;
- ``oauthbearer_server``: OAUTHBEARER (RFC 7628) with Kafka's unsecured-JWS validator;
- ``jaas``: the JAAS configuration syntax of ``sasl.jaas.config``;
- ``sasl``: one connection's SaslHandshake/SaslAuthenticate state (Kafka's
  SaslServerAuthenticator), re-authentication (KIP-368) included;
- ``sasl_client``: the client side (PLAIN, SCRAM, OAUTHBEARER) node-to-node
  connections and the tools use;
- ``jwks``: the JWKS key sets OAUTHBEARER tokens are verified against;
- ``authorization``, ``authorized_operations``: the request handlers' questions to
  the authorizer, and the bitfields a broker without one reports.
"""
