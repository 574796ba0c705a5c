"""``owx runtime``: run the Python action runtime, build its images, and name them for clients."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``owx runtime {serve,build-image,alias}``."""
    from .python_action import add_arguments

    parser = sub.add_parser("runtime", help="run an action runtime, build its images, alias them")
    commands = parser.add_subparsers(dest="runtime_command", required=True)

    serve = commands.add_parser("serve", help="serve OpenWhisk's runtime protocol (POST /init, /run)")
    add_arguments(serve)
    serve.set_defaults(handler=_serve)

    build = commands.add_parser(
        "build-image", help="build a runtime image locally (base image made offline; --requirements reaches PyPI)")
    build.add_argument("--tensorflow", action="store_true", help="the Python+TensorFlow image instead")
    build.add_argument("--name", help="with --requirements: the derived image's name (e.g. owx/lithops-runtime:latest)")
    build.add_argument("--requirements", type=Path, metavar="FILE",
                       help="derive an image from owx's Python runtime with these pip requirements")
    build.add_argument("--alias", action="append", default=[], metavar="IMAGE",
                       help="also name the image IMAGE (repeatable), e.g. the runtime image a client asks for")
    build.add_argument("--force", action="store_true", help="rebuild from scratch even if the image exists")
    build.set_defaults(handler=_build_image)

    alias = commands.add_parser("alias", help="name a local image as another image (the one a client asks for)")
    alias.add_argument("image", help="the image actions ask for, e.g. docker.io/lithopscloud/openwhisk-python-v311")
    alias.add_argument("--to", required=True, metavar="LOCAL", help="the local image that runs instead")
    alias.set_defaults(handler=_alias)


def _serve(args: argparse.Namespace) -> int:
    from .python_action import serve

    try:
        serve(args.host, args.port, args.fd)
    except KeyboardInterrupt:
        pass
    return 0


def _build_image(args: argparse.Namespace) -> int:
    from owx.common.dockerd import ensure_dockerd

    from .image.build import PYTHON_IMAGE, RUNTIME_IMAGES, TENSORFLOW_IMAGE, add_alias, derived, ensure_runtime

    if args.requirements is not None:
        if not args.name or args.tensorflow:
            raise SystemExit("owx runtime build-image: --requirements needs --name (and no --tensorflow)")
        spec = derived(args.name, args.requirements.read_text())
    elif args.name:
        raise SystemExit("owx runtime build-image: --name is for a derived image (give --requirements)")
    else:
        spec = RUNTIME_IMAGES[TENSORFLOW_IMAGE if args.tensorflow else PYTHON_IMAGE]
    client = ensure_dockerd()
    image = ensure_runtime(spec, force=args.force, client=client, progress=print)
    for name in args.alias:
        add_alias(client, image, name)
    print(" ".join([spec.name, image.short_id, *args.alias]))
    return 0


def _alias(args: argparse.Namespace) -> int:
    import docker.errors

    from owx.common.dockerd import ensure_dockerd

    from .image.build import add_alias

    client = ensure_dockerd()
    try:
        image = client.images.get(args.to)
    except docker.errors.ImageNotFound:
        raise SystemExit(f"owx runtime alias: no local image {args.to}") from None
    add_alias(client, image, args.image)
    print(f"{args.image} -> {args.to} {image.short_id}")
    return 0
