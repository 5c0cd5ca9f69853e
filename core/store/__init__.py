"""ldptel.store: every module that talks to Redis.

What lives here: the client and the embedded server (``redis_client``, ``redis_server``), the
per-role users (``acl``), the Lua scripts (``scripts``, ``release_scripts``), the campaign
registry (``registry``), tallies and published estimates (``tally``, ``published``), the
analyzer's public keys (``analyzer_keys``) and what still needs each of them (``key_refs``),
heartbeats (``heartbeat``) and the loop that rides out a Redis outage (``runner``).

What it may import: ``ldptel.campaigns``, ``ldptel.privacy``, ``ldptel.ops``, the SDK-safe root
modules, ``ldptel.mechanisms`` and ``ldptel.proto``; never a service.
"""
