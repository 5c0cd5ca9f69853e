"""The shuffler stage (``ldptel shuffle``): collector ingress streams → permuted, re-packed
reports in the analysis streams the aggregator reads (``worker.Shuffler``; the CLI entry and the
child process of ``ldptel serve`` in ``runners``)."""
