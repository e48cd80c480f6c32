"""The web console (``console.listener=http://HOST:PORT``, off unless set).

Server-rendered pages read from the broker's in-process state, and what lives
on other brokers through broker/http/cluster_reader.py (broker/http/console/views.py),
so any broker's console shows the whole cluster; changes sent as Kafka requests through the broker's own dispatcher
(admin.py), lag and broker counters sampled in memory for
``console.lag.history.ms`` and drawn as server-side SVG (history.py), the
schema registry read from this broker's own replay of ``_schemas`` (schemas.py), all
served by the broker itself with one small script and one style sheet
(server.py, static/, templates/): nothing is fetched from elsewhere.
"""

from broker.http.console.server import Console

__all__ = ["Console"]
