"""ldptel.campaigns: what a campaign is, parsed and checked, with no I/O.

What lives here: the campaign record and its parser (``campaign``), the config file (``config``),
per-kind keys (``kinds``, ``shuffled_kinds``), limits on degenerate parameters (``limits``), how a
table picks and plans its privacy mode (``modes``), and the registry's record rules across
versions (``records``).

What it may import: ``ldptel.privacy`` (the planner, loaded only when a shuffled mode is planned),
the SDK-safe root modules, ``ldptel.mechanisms`` and ``ldptel.proto``; never Redis
(``ldptel.store``) or a service.
"""
