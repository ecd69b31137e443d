"""The ``server.deploy`` package: one module per command, every subcommand dispatched, shared facts written once."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from server import deploy
from server.deploy import certs, cli, compose, connection, follow, shared, superlink, supernode

PACKAGE = Path(deploy.__file__).parent
SUBCOMMANDS = ["certs", "keys", "superlink", "supernode", "compose", "connection", "register", "run", "wait"]


def _choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    """``umbel deploy``'s subcommand parsers, in the order ``--help`` lists them."""
    parser = argparse.ArgumentParser(prog="umbel")
    deploy.add_parser(parser.add_subparsers(dest="command"))
    return _choices(_choices(parser)["deploy"])


def test_no_module_of_the_package_is_over_400_lines():
    lengths = {p.name: len(p.read_text().splitlines()) for p in PACKAGE.glob("*.py")}
    assert set(lengths) >= {"certs.py", "superlink.py", "supernode.py", "compose.py", "connection.py", "follow.py"}
    assert max(lengths.values()) <= 400, lengths


def test_every_subcommand_is_listed_in_order_and_has_exactly_one_handler():
    assert list(_subparsers()) == SUBCOMMANDS
    assert sorted(cli._COMMANDS) == sorted(SUBCOMMANDS)
    owners = [name for module in (certs, superlink, supernode, compose, connection, follow) for name in module.COMMANDS]
    assert sorted(owners) == sorted(SUBCOMMANDS)  # no subcommand claimed by two modules


def test_the_project_paths_point_at_the_repository_not_the_package():
    assert (shared.PROJECT_ROOT / "pyproject.toml").is_file()
    assert shared.SECRETS == shared.PROJECT_ROOT / "deploy" / "secrets"
    assert (shared.DEPLOY_DIR / "Dockerfile").is_file()


def test_usage_errors_share_one_exit_code_across_the_commands():
    assert follow.EXIT_USAGE == supernode.EXIT_USAGE == shared.EXIT_USAGE == 2
    assert shared.EXIT_USAGE in supernode.EXIT_CODES
    assert len(set(supernode.EXIT_CODES)) == len(supernode.EXIT_CODES) == 6


def test_a_usage_error_of_any_command_exits_2_naming_the_command(tmp_path, capsys):
    args = argparse.Namespace(deploy_command="keys", count=None, name=[], out=tmp_path, force=False)
    assert deploy.run(args) == shared.EXIT_USAGE
    assert "umbel deploy keys: error: give --count or --name" in capsys.readouterr().err
    (tmp_path / "ca.crt").write_text("")
    args = argparse.Namespace(deploy_command="certs", out=tmp_path, host=[], days=365, force=False)
    assert deploy.run(args) == shared.EXIT_USAGE
    assert "already exist; pass --force" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("address", "expected"),
    [("127.0.0.1:8000", ("127.0.0.1", 8000)), ("[::1]:9092", ("::1", 9092)), ("superlink:1", ("superlink", 1))],
)
def test_addresses_split_into_host_and_port(address, expected):
    assert shared.split_address(address) == expected


@pytest.mark.parametrize("address", ["127.0.0.1", ":8000", "host:port", "host:"])
def test_an_address_without_host_or_numeric_port_is_refused(address):
    with pytest.raises(ValueError, match=r"The 'superlink' parameter must be HOST:PORT\. Got .* instead\."):
        shared.split_address(address)


def test_defaults_are_written_once_in_shared():
    assert superlink.superlink_command.__kwdefaults__["port"] == shared.FLEET_PORT
    assert superlink.superlink_command.__kwdefaults__["control_port"] == shared.CONTROL_PORT
    assert supernode.supernode_command.__kwdefaults__["port"] == shared.SUPERNODE_PORT
    assert compose.compose_config.__kwdefaults__["max_retries"] == shared.MAX_RETRIES
    node = _subparsers()["supernode"].parse_args(["--superlink", "h:1", "--partition-id", "0", "--num-partitions", "1"])
    assert (node.max_retries, node.max_wait_time) == (shared.MAX_RETRIES, shared.MAX_WAIT_TIME)
