"""The control plane's launcher without binaries: what it says when it cannot start, and its inputs.

These run everywhere; the real start is in test_real_control_plane.py.
"""

from __future__ import annotations

import pathlib
import socket
import sys

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gem_operator.fleet import GPU, make_fleet
from gem_testbed.controlplane import ControlPlane, ControlPlaneError, MissingBinaryError, kwok_nodes
from gem_testbed.controlplane.binaries import CORE, SUMMARY_NAME, find_binary
from gem_testbed.controlplane.kwok import MANAGED_ANNOTATION, stages
from gem_testbed.controlplane.pki import generate_pki

HEADER = "component\tversion\tstatus\tpath\tbuild_seconds\tnote\n"


def _summary(cache: pathlib.Path, rows: dict[str, tuple[str, pathlib.Path]]) -> None:
    lines = [f"{name}\tv1\t{status}\t{path}\t0\t-\n" for name, (status, path) in rows.items()]
    (cache / SUMMARY_NAME).write_text(HEADER + "".join(lines))


def test_an_empty_cache_names_the_binary_and_the_build_script(tmp_path: pathlib.Path) -> None:
    with pytest.raises(MissingBinaryError) as caught:
        ControlPlane(cache=tmp_path)
    assert caught.value.name == "etcd"
    assert "scripts/control-plane/build.sh" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_failed_build_is_reported_as_such(tmp_path: pathlib.Path) -> None:
    _summary(tmp_path, {"kube-apiserver": ("failed", tmp_path / "kube-apiserver")})
    with pytest.raises(MissingBinaryError, match="left it failed"):
        find_binary("kube-apiserver", tmp_path)


def test_an_available_row_whose_file_is_gone_is_missing(tmp_path: pathlib.Path) -> None:
    _summary(tmp_path, {"kwok": ("available", tmp_path / "kwok")})
    with pytest.raises(MissingBinaryError, match="not an executable file"):
        find_binary("kwok", tmp_path)


def test_a_taken_api_server_port_is_one_clear_line(tmp_path: pathlib.Path) -> None:
    # Any executable passes the binary check; the port check comes before anything is started.
    _summary(tmp_path, {name: ("available", pathlib.Path(sys.executable)) for name in CORE})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ControlPlaneError) as caught:
            ControlPlane(cache=tmp_path, apiserver_port=port)
    assert str(caught.value).startswith(f"port {port} for kube-apiserver on 127.0.0.1 is in use")
    assert "\n" not in str(caught.value)


def test_fleet_nodes_keep_gpu_capacity_and_topology_and_are_marked_for_kwok() -> None:
    fleet = make_fleet(4, gpus_per_host=8, hosts_per_nvlink_domain=2)
    nodes = kwok_nodes(fleet)
    assert [n["metadata"]["name"] for n in nodes] == [n["metadata"]["name"] for n in fleet]
    for source, node in zip(fleet, nodes, strict=True):
        assert node["metadata"]["annotations"][MANAGED_ANNOTATION] == "fake"
        assert node["status"]["allocatable"][GPU] == "8"
        assert node["metadata"]["labels"] == source["metadata"]["labels"]
        assert "conditions" not in node["status"]
        assert "conditions" in source["status"], "the fleet itself is not modified"


def test_pod_stage_names_are_unique_and_each_step_is_delayed() -> None:
    pod_stages = [s for s in stages(step_delay_ms=300) if s["spec"]["resourceRef"]["kind"] == "Pod"]
    names = [s["metadata"]["name"] for s in pod_stages]
    assert len(set(names)) == len(names)
    delayed = [s["metadata"]["name"] for s in pod_stages if s["spec"].get("delay", {}).get("durationMilliseconds")]
    assert delayed == [n for n in names if n != "gem-pod-delete"]


def test_certificates_chain_to_the_ca_with_the_identities_rbac_expects(tmp_path: pathlib.Path) -> None:
    pki = generate_pki(tmp_path, service_ip="10.96.0.1")
    ca = x509.load_pem_x509_certificate(pki.ca.cert.read_bytes())
    admin = x509.load_pem_x509_certificate(pki.admin.cert.read_bytes())
    serving = x509.load_pem_x509_certificate(pki.apiserver.cert.read_bytes())
    for cert in (admin, serving):
        cert.verify_directly_issued_by(ca)
    assert admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    usage = admin.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in usage
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "10.96.0.1"}
    assert pki.service_account_key.stat().st_mode & 0o077 == 0
