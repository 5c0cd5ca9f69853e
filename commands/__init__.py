"""The ``ldptel`` command line: every subcommand, ``serve`` and its supervisor, the demo, the
audit, the Redis ACL and campaign administration, and ``simulate``. The top floor: it wires the
services together and nothing below imports it."""
