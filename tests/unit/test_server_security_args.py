"""`ServerConfig`'s security options: gRPC TLS files and the restricted-protocol header (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from triton_fastpath.errors import ConfigError
from triton_fastpath.serve.server_config import ServerConfig, ServerLayout, admin_headers, redact_args, to_args_list

SECRET = "s3cret-value-0123456789"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "repo").mkdir()
    return tmp_path / "repo"


@pytest.fixture
def layout(tmp_path: Path) -> ServerLayout:
    return ServerLayout(root=tmp_path / "ts", libs_dir=tmp_path / "libs")


@pytest.fixture
def pem(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")
    key.write_text("-----BEGIN PRIVATE KEY-----\n")
    return cert, key


def values(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == flag]


def test_defaults_have_no_tls_and_no_restriction(repo: Path, layout: ServerLayout) -> None:
    args = to_args_list(ServerConfig(repo), layout)
    assert not [a for a in args if "ssl" in a or "restricted" in a]
    assert admin_headers(ServerConfig(repo)) == {}


def test_restricted_header_guards_model_repository_on_grpc_and_http(repo: Path, layout: ServerLayout) -> None:
    config = ServerConfig(repo, model_control_mode="explicit", restricted_header=("admin-key", SECRET))
    args = to_args_list(config, layout)
    assert values(args, "--grpc-restricted-protocol") == [f"model-repository:admin-key={SECRET}"]
    assert values(args, "--http-restricted-api") == [f"model-repository:admin-key={SECRET}"]
    assert values(args, "--model-control-mode") == ["explicit"]


def test_several_restricted_protocols_are_joined_with_commas(repo: Path, layout: ServerLayout) -> None:
    config = ServerConfig(
        repo, restricted_protocols=("model-repository", "shared-memory"), restricted_header=("k", SECRET)
    )
    assert values(to_args_list(config, layout), "--grpc-restricted-protocol") == [
        f"model-repository,shared-memory:k={SECRET}"
    ]


def test_admin_headers_use_tritons_grpc_prefix_and_the_plain_key_on_http(repo: Path) -> None:
    config = ServerConfig(repo, restricted_header=("admin-key", SECRET))
    assert admin_headers(config) == {"triton-grpc-protocol-admin-key": SECRET}
    assert admin_headers(config, "http") == {"admin-key": SECRET}
    with pytest.raises(ValueError, match="protocol"):
        admin_headers(config, "smtp")


def test_redact_args_hides_the_secret_and_repr_never_shows_it(repo: Path, layout: ServerLayout) -> None:
    config = ServerConfig(repo, restricted_header=("admin-key", SECRET))
    redacted = " ".join(redact_args(to_args_list(config, layout), config))
    assert SECRET not in redacted and "admin-key=<redacted>" in redacted
    assert SECRET not in repr(config)


def test_tls_adds_ssl_flags_with_both_files(repo: Path, layout: ServerLayout, pem: tuple[Path, Path]) -> None:
    cert, key = pem
    config = ServerConfig(repo, grpc_server_cert=cert, grpc_server_key=str(key))
    args = to_args_list(config, layout)
    assert values(args, "--grpc-use-ssl") == ["true"]
    assert values(args, "--grpc-server-cert") == [str(cert)]
    assert values(args, "--grpc-server-key") == [str(key)]
    assert config.grpc_tls


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"restricted_protocols": ("model-repository", "admin")}, "restricted_protocols"),
        ({"restricted_protocols": ()}, "restricted_protocols"),
        ({"restricted_header": ("Admin Key", SECRET)}, "restricted_header"),
        ({"restricted_header": ("admin-key", "short")}, "restricted_header"),
        ({"restricted_header": ("admin-key", "has spaces in the value")}, "restricted_header"),
        ({"restricted_header": ("only-a-key",)}, "restricted_header"),
    ],
)
def test_bad_security_options_name_the_field(repo: Path, options: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{field}") as caught:
        ServerConfig(repo, **options)
    assert SECRET not in str(caught.value) and "has spaces" not in str(caught.value)


def test_tls_needs_both_files_and_existing_ones(repo: Path, pem: tuple[Path, Path], tmp_path: Path) -> None:
    cert, _ = pem
    with pytest.raises(ConfigError, match="grpc_server_cert/grpc_server_key"):
        ServerConfig(repo, grpc_server_cert=cert)
    with pytest.raises(ConfigError, match=r"grpc_server_key: .* is not a file"):
        ServerConfig(repo, grpc_server_cert=cert, grpc_server_key=tmp_path / "missing.pem")
