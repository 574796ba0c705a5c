"""``owx runtime``: run the Python action runtime, or build its container images."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``owx runtime {serve,build-image}``."""
    from .python_action import add_arguments

    parser = sub.add_parser("runtime", help="run an action runtime or build its image")
    commands = parser.add_subparsers(dest="runtime_command", required=True)

    serve = commands.add_parser("serve", help="serve OpenWhisk's runtime protocol (POST /init, /run)")
    add_arguments(serve)
    serve.set_defaults(handler=_serve)

    build = commands.add_parser("build-image", help="build the runtime image locally (base image made offline)")
    build.add_argument("--tensorflow", action="store_true", help="the Python+TensorFlow image instead")
    build.add_argument("--force", action="store_true", help="rebuild from scratch even if the image exists")
    build.set_defaults(handler=_build_image)


def _serve(args: argparse.Namespace) -> int:
    from .python_action import serve

    try:
        serve(args.host, args.port, args.fd)
    except KeyboardInterrupt:
        pass
    return 0


def _build_image(args: argparse.Namespace) -> int:
    from .image.build import PYTHON_IMAGE, TENSORFLOW_IMAGE, ensure_image

    name = TENSORFLOW_IMAGE if args.tensorflow else PYTHON_IMAGE
    image = ensure_image(name, force=args.force, progress=print)
    print(f"{name} {image.short_id}")
    return 0
