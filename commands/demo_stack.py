"""The running stack of ``ldptel demo``: an embedded Redis with the role users of ``ldptel serve``
(in the demo's data directory), the collector app on a Werkzeug HTTP server thread, the Privacy
Pass token issuer (``[issuer]``: on its own Werkzeug thread, port and Redis user ``issuer``), a
shuffler and an aggregator thread (``Stack``), and one keep-alive HTTP connection to it (``Http``)."""

from __future__ import annotations

import http.client
import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from ldptel.campaigns.config import Campaign, Config


class Stack:
    """Embedded Redis (role users, as ``ldptel serve`` makes them, in ``data_dir``) + collector
    (Werkzeug HTTP server thread) + shuffler and aggregator threads; the config's campaigns in
    the registry."""

    def __init__(self, config: Config, port: int, data_dir: Path) -> None:
        from werkzeug.serving import make_server

        from ldptel import credentials
        from ldptel.aggregator.runners import BackgroundAggregator
        from ldptel.commands.acl_admin import embedded_acl
        from ldptel.server.app import create_app
        from ldptel.shuffler.runners import BackgroundShuffler
        from ldptel.store import registry
        from ldptel.store.redis_client import connect
        from ldptel.store.redis_server import EmbeddedRedis, free_port

        self.config = config
        redis_port = free_port()
        acl_args, password, creds = embedded_acl(config, data_dir, redis_port)
        os.environ[credentials.ENV] = str(creds)  # every client of this process connects as its role
        shutil.rmtree(data_dir / "redis", ignore_errors=True)  # a demo starts from nothing
        self.redis_server = EmbeddedRedis(data_dir / "redis", redis_port, acl_args, password=password).start()
        self.server = self.agg = self.shuffler = None
        self.issuer: Any = None  # the issuer's Werkzeug server (``_start_issuer``)
        try:
            self.redis = connect(self.redis_server.url, role="reader")
            self.admin = connect(self.redis_server.url, role="admin")
            registry.apply(self.admin, config.tables, by="ldptel demo", via="apply", shuffler=config.shuffler)
            if config.issuer is not None:  # issue 37: devices fetch a token per shuffled envelope
                config = self.config = self._start_issuer(config)
            self.app = create_app(config, self.redis_server.url)
            if "export" not in self.app.blueprints:
                from ldptel.server.export import bp

                self.app.register_blueprint(bp)
            logging.getLogger("werkzeug").setLevel(logging.WARNING)
            self.server = make_server("127.0.0.1", port, self.app, threaded=True)
            self.port = self.server.server_port
            self.url = f"http://127.0.0.1:{self.port}"
            self._http = threading.Thread(target=self.server.serve_forever, name="ldptel-http", daemon=True)
            self._http.start()
            self.shuffler = BackgroundShuffler(config, self.redis_server.url).start()
            self.agg = BackgroundAggregator(config, self.redis_server.url, log=lambda _m: None).start()
        except BaseException:
            self.stop()
            raise

    def _start_issuer(self, config: Config) -> Config:
        """The token issuer on ``[issuer] port`` (a free port when that one is taken: another
        demo, a test), on its own thread; the config with the port the devices are told."""
        import dataclasses

        from werkzeug.serving import make_server

        from ldptel.server.issuer import create_issuer_app

        wanted = config.issuer
        assert wanted is not None
        app = create_issuer_app(config, self.redis_server.url)
        try:
            server = make_server("127.0.0.1", wanted.port, app, threaded=True)
        except OSError:
            server = make_server("127.0.0.1", 0, app, threaded=True)
        self.issuer = server
        threading.Thread(target=server.serve_forever, name="ldptel-issuer", daemon=True).start()
        if server.server_port == wanted.port:
            return config
        return dataclasses.replace(config, issuer=dataclasses.replace(wanted, port=server.server_port))

    def campaigns(self) -> list[Campaign]:
        """The campaigns as the collector knows them now (the registry's latest versions)."""
        return list(self.app.extensions["ldptel"].live.config.campaigns)

    def stop(self) -> None:
        for runner in (self.shuffler, self.agg):
            if runner is not None:
                runner.request_stop()  # both finish their current step at once
        if self.shuffler is not None:
            self.shuffler.stop()
        if self.agg is not None:
            self.agg.stop()
        for server in (self.server, self.issuer):
            if server is not None:
                server.shutdown()
                server.server_close()
        self.redis_server.cleanup()


class Http:
    """One keep-alive connection to the collector; ``window`` (once set) is added to every GET of
    a campaign's export document that names none: the first table reads the window its devices
    reported in."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.window: int | None = None

    def request(self, method: str, path: str, body: bytes | None, headers: dict[str, Any]
                ) -> tuple[int, bytes]:
        if method == "GET" and self.window is not None and path.startswith("/v1/campaigns/") \
                and "window=" not in path:
            path += ("&" if "?" in path else "?") + f"window={self.window}"
        for attempt in range(5):
            try:
                self.conn.request(method, path, body=body, headers=headers)
                resp = self.conn.getresponse()
                data = resp.read()
            except (ConnectionError, http.client.HTTPException):
                self.conn.close()
                time.sleep(0.1 * (attempt + 1))
                continue
            if resp.status in (429, 503):
                time.sleep(float(resp.getheader("Retry-After") or 1))
                continue
            return resp.status, data
        raise RuntimeError(f"{method} {path}: collector unreachable")

    def close(self) -> None:
        self.conn.close()


