"""Authentication for SASL listeners: pure state machines, wired by broker/net/sasl_listener.py.

Every module of this package is pure by convention (broker/ is not one of the
layers the layering test keeps pure): no asyncio, no sockets, no clock of its
own. Time comes in as ``now_ms`` arguments and randomness from ``secrets``, so
the connection layer decides when frames arrive and what to send, and the
tests drive every exchange byte by byte.

- ``mechanism``: the failure exception and the interface each mechanism serves;
- ``scram_server``: SCRAM-SHA-256/512 (RFC 5802, 7677), Kafka's delegation tokens;
- ``plain_server``: PLAIN (RFC 4616) over users of a JAAS config;
- ``oauthbearer_server``: OAUTHBEARER (RFC 7628) with Kafka's unsecured-JWS validator;
- ``jaas``: the JAAS configuration syntax of ``sasl.jaas.config``;
- ``sasl``: one connection's SaslHandshake/SaslAuthenticate state (Kafka's
  SaslServerAuthenticator), re-authentication (KIP-368) included.
"""
