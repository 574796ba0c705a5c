"""``owx admin user create|list|get|delete|rotate``: subjects and keys of an owx instance;
``owx admin account set|unset|list``: tenants' own upstream namespaces (:mod:`.accounts`).

While the gateway runs (it owns its store) the command goes through the gateway's admin socket;
otherwise it opens the store itself.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from owx.gateway.admin.accounts import StoredAccounts
from owx.gateway.admin.socket import AdminClient
from owx.gateway.admin.users import AdminError, UserKey, Users
from owx.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("admin", help="administer subjects and keys (like wskadmin)")
    parser.add_argument("--data-dir", type=Path, help="the instance's data dir (OWX_DATA_DIR)")
    objects = parser.add_subparsers(dest="object", required=True)
    users = objects.add_parser("user", help="subjects and their keys")
    verbs = users.add_subparsers(dest="verb", required=True)
    create = verbs.add_parser("create", help="a new subject (or a new namespace key of one); prints uuid:key")
    create.add_argument("subject")
    create.add_argument("--namespace", "-ns", help="the namespace (default: the subject's name)")
    create.add_argument("--auth", "-u", help="use this uuid:key instead of a random one ('-': read it from stdin, "
                        "out of sight of other processes)")
    verbs.add_parser("list", help="every subject, namespace and uuid")
    get = verbs.add_parser("get", help="a subject's keys (uuid:key per namespace)")
    get.add_argument("subject")
    for name, text in (("delete", "remove a subject's keys"), ("rotate", "give a key a new secret; prints uuid:key")):
        verb = verbs.add_parser(name, help=text)
        verb.add_argument("subject")
        verb.add_argument("--namespace", "-ns", help="only this namespace's key")
    accounts = objects.add_parser("account", help="namespaces run in an upstream OpenWhisk namespace of their "
                                  "own, throttled apart from the others").add_subparsers(dest="verb", required=True)
    account_set = accounts.add_parser("set", help="run NAMESPACE's invocations with this upstream key")
    account_set.add_argument("namespace")
    account_set.add_argument("auth", metavar="UUID:KEY", nargs="?", default="-",
                             help="the key of its upstream namespace (default '-': read from stdin, out of sight "
                             "of other processes; a command line is visible to every process of the machine)")
    accounts.add_parser("unset", help="NAMESPACE shares owx's upstream key again").add_argument("namespace")
    accounts.add_parser("list", help="namespaces with an account, and its uuid")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = Settings() if args.data_dir is None else Settings(data_dir=args.data_dir)
    client = AdminClient(settings.data_dir)
    try:
        if client.reachable():
            return _do(args, client, client)
        from owx.gateway.stores import open_stores

        entities, activations = open_stores(settings)
        try:  # owx is not running: its next start applies what is stored
            return _do(args, Users(entities), StoredAccounts(entities))
        finally:
            activations.close()
            entities.close()
    except AdminError as exc:
        print(f"owx admin: {exc}", file=sys.stderr)
        return 2


def _do(args: argparse.Namespace, users: AdminClient | Users, accounts: AdminClient | StoredAccounts) -> int:
    if args.object == "account":
        return _account(args, accounts)
    if args.verb == "create":
        print(users.create(args.subject, args.namespace, _given(args.auth)).auth)
    elif args.verb == "list":
        for key in users.keys(None):
            print(f"{key.subject}\t{key.namespace}\t{key.uuid}")
    elif args.verb == "get":
        keys = users.keys(args.subject)
        if not keys:
            raise AdminError(f"no subject {args.subject!r}")
        _print_keys(keys)
    elif args.verb == "delete":
        removed = users.delete(args.subject, args.namespace)
        print(f"deleted {len(removed)} key(s) of {args.subject}")
    else:
        print(users.rotate(args.subject, args.namespace).auth)
    return 0


def _account(args: argparse.Namespace, accounts: AdminClient | StoredAccounts) -> int:
    if args.verb == "set":
        print(f"{args.namespace} runs upstream as {accounts.set(args.namespace, _given(args.auth))}")
    elif args.verb == "unset":
        accounts.unset(args.namespace)
        print(f"{args.namespace} shares owx's upstream key")
    else:
        for namespace, key_uuid in sorted(accounts.uuids().items()):
            print(f"{namespace}\t{key_uuid}")
    return 0


def _given(auth: str | None) -> str | None:
    """``auth`` as given, or the first line of stdin for ``-``."""
    return sys.stdin.readline().strip() if auth == "-" else auth


def _print_keys(keys: list[UserKey]) -> None:
    for key in keys:
        print(f"{key.auth}\t{key.namespace}")
