"""Regenerate the committed Python for the wire schema: ``python -m ldptel.proto.regenerate``.

Uses grpcio-tools' bundled protoc (pinned in pyproject), so the output is reproducible; a test
checks that regeneration gives the committed files byte for byte: the module (``_pb2.py``) and its
type stubs (``_pb2.pyi``, read by mypy).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEMAS = ["ldptel/v1/reports.proto"]


def generate(out_dir: Path) -> list[Path]:
    """Run protoc on the schemas into ``out_dir``; return the generated modules and stubs."""
    from grpc_tools import protoc

    out_dir.mkdir(parents=True, exist_ok=True)
    for schema in SCHEMAS:
        rc = protoc.main(["protoc", f"-I{HERE}", f"--python_out={out_dir}", f"--pyi_out={out_dir}",
                          str(HERE / schema)])
        if rc != 0:
            raise RuntimeError(f"protoc failed on {schema} (exit {rc})")
    return [out_dir / schema.replace(".proto", f"_pb2{suffix}") for schema in SCHEMAS
            for suffix in (".py", ".pyi")]


if __name__ == "__main__":
    for path in generate(HERE):
        print(f"wrote {path.relative_to(HERE.parent)}", file=sys.stderr)
