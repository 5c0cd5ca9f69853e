"""ldptel.ops: what every service process shares to be operated, without Redis: the Prometheus
registry and its multiprocess files (``prom``).

What it may import: the SDK-safe root modules; never ``ldptel.store``, ``ldptel.campaigns``,
``ldptel.privacy`` or a service.
"""
