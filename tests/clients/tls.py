"""A TLS terminator (socat) in front of a plain-HTTP gateway, with a throw-away self-signed certificate.

Lithops' OpenWhisk client speaks HTTPS only (it rewrites ``http:`` to ``https:``); until ``owx up``
serves TLS itself, its tests reach the gateway through this, as a deployment behind a terminator does.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path


class TlsTerminator:
    """``socat OPENSSL-LISTEN`` on a free local port, forwarding to ``127.0.0.1:<backend_port>``."""

    def __init__(self, workdir: Path, backend_port: int) -> None:
        for tool in ("socat", "openssl"):
            if shutil.which(tool) is None:
                raise RuntimeError(f"{tool} is not installed (apt-get install -y socat openssl)")
        workdir.mkdir(parents=True, exist_ok=True)
        self.certificate = cert = workdir / "cert.pem"
        key = workdir / "key.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        listen = f"OPENSSL-LISTEN:{self.port},bind=127.0.0.1,reuseaddr,fork,cert={cert},key={key},verify=0"
        self.proc = subprocess.Popen(["socat", listen, f"TCP:127.0.0.1:{backend_port}"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"socat did not listen on {self.port}")

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
