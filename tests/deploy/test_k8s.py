"""deploy/k8s/, offline: every manifest against the pinned Kubernetes schemas (kubernetes-validate,
strict), then the wiring between them: probes, ports, the autoscaler's metric and its adapter rule,
the Redis secret, selectors, resource requests, and the same tritonserver flags as docker-compose.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from triton_fastpath.paths import ROOT

K8S_DIR = ROOT / "deploy" / "k8s"
KUBERNETES_VERSION = "1.31.0"  # pinned: an old-enough release most clusters run or exceed
MANIFESTS = sorted(K8S_DIR.glob("*.yaml"))
DOCS = [doc for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


def find(kind: str, name: str) -> dict:
    for doc in DOCS:
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(f"no {kind}/{name} in {K8S_DIR}")


def containers() -> list[tuple[str, dict]]:
    return [
        (doc["metadata"]["name"], c)
        for doc in DOCS
        if doc["kind"] == "Deployment"
        for c in doc["spec"]["template"]["spec"]["containers"]
    ]


@pytest.mark.parametrize("path", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_manifest_is_valid_for_the_pinned_kubernetes_version_in_strict_mode(path: Path) -> None:
    for doc in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_strict_validation_rejects_a_misspelled_field() -> None:
    broken = copy.deepcopy(find("Deployment", "triton"))
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError, match="readinesProbe"):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_the_folder_holds_every_piece_the_issue_asks_for() -> None:
    kinds = {(doc["kind"], doc["metadata"]["name"]) for doc in DOCS}
    assert {
        ("Deployment", "triton"),
        ("Service", "triton"),
        ("Service", "triton-grpc"),
        ("HorizontalPodAutoscaler", "triton"),
        ("ConfigMap", "triton-adapter-rules"),
        ("PodDisruptionBudget", "triton"),
        ("Deployment", "redis"),
        ("Service", "redis"),
        ("Deployment", "locust-master"),
        ("Service", "locust-master"),
        ("Deployment", "locust-worker"),
    } <= kinds


def triton_container() -> dict:
    return find("Deployment", "triton")["spec"]["template"]["spec"]["containers"][0]


def test_triton_probes_ask_every_top_level_model_for_an_answer_after_a_long_startup_window() -> None:
    from triton_fastpath.config.render import Target, parse_pbtxt, to_pbtxt
    from triton_fastpath.models.bundled import default_specs
    from triton_fastpath.sdk.codegen import plan_models

    triton = triton_container()
    http = {p["name"]: p["containerPort"] for p in triton["ports"]}["http"]
    startup, ready, live = triton["startupProbe"], triton["readinessProbe"], triton["livenessProbe"]
    assert startup["httpGet"] == {"path": "/v2/health/ready", "port": "http"} and http == 8000
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600  # models load and warm up first
    container = {s.name: parse_pbtxt(to_pbtxt(s, Target.CONTAINER)) for s in default_specs(target="container")}
    top_level = plan_models(container).selected
    for probe in (ready, live):
        command = probe["exec"]["command"]
        assert command[:2] == ["python3", "/opt/fastpath/health_probe.py"]
        assert command[command.index("--url") + 1] == "http://127.0.0.1:8000"
        assert sorted(command[i + 1] for i, arg in enumerate(command) if arg == "--model") == sorted(top_level)
        assert probe["timeoutSeconds"] >= 15  # two attempts per model, 5 s each at worst
    assert ready["failureThreshold"] == 1  # out of the Service at the first failed answer
    assert live["periodSeconds"] * live["failureThreshold"] >= 60  # restarted only when broken for a minute


def test_the_image_ships_the_probe_the_manifests_call() -> None:
    dockerfile = (ROOT / "deploy" / "triton" / "Dockerfile").read_text()
    assert "COPY triton_fastpath/serve/health.py /opt/fastpath/health_probe.py" in dockerfile
    assert "!triton_fastpath/serve/health.py" in (ROOT / "deploy" / "triton" / "Dockerfile.dockerignore").read_text()
    imports = {
        line.split()[1].split(".")[0]
        for line in (ROOT / "triton_fastpath" / "serve" / "health.py").read_text().splitlines()
        if line.startswith(("import ", "from "))
    }
    assert imports <= {"__future__", "argparse", "contextlib", "json", "sys", "time", "urllib", "dataclasses"}, imports


def test_triton_runs_with_the_same_server_flags_as_the_compose_file(compose: dict) -> None:
    assert triton_container()["args"] == compose["services"]["triton"]["command"]


def test_services_target_named_ports_and_grpc_is_marked_h2c() -> None:
    ports = {p["name"]: p["containerPort"] for p in triton_container()["ports"]}
    for name in ("triton", "triton-grpc"):
        service = find("Service", name)
        assert service["spec"]["selector"] == find("Deployment", "triton")["spec"]["selector"]["matchLabels"]
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports and port["port"] == ports[port["targetPort"]]
            if port["name"] == "grpc":
                assert port["appProtocol"] == "kubernetes.io/h2c"
    assert find("Service", "triton-grpc")["spec"]["clusterIP"] == "None"  # per-pod records for client balancing


def test_the_autoscaler_uses_the_metric_its_adapter_rule_defines() -> None:
    hpa = find("HorizontalPodAutoscaler", "triton")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "triton"}
    (metric,) = hpa["spec"]["metrics"]
    rules = yaml.safe_load(find("ConfigMap", "triton-adapter-rules")["data"]["config.yaml"])["rules"]
    (rule,) = [r for r in rules if r["name"]["as"] == metric["pods"]["metric"]["name"]]
    assert metric["type"] == "Pods" and metric["pods"]["target"]["type"] == "AverageValue"
    query = " ".join(rule["metricsQuery"].split())
    assert query.startswith("max by (<<.GroupBy>>) (")  # the pod's worst model, not a pod-wide ratio
    per_model = "sum by (<<.GroupBy>>, model) (rate({}{{<<.LabelMatchers>>}}[1m]))"
    assert per_model.format("nv_inference_queue_duration_us") in query
    assert per_model.format("nv_inference_request_success") in query
    assert rule["resources"]["overrides"]["pod"] == {"resource": "pod"}
    assert hpa["spec"]["minReplicas"] >= 1 and hpa["spec"]["maxReplicas"] > hpa["spec"]["minReplicas"]


def adapter_rule_file(tmp_path: Path) -> Path:
    """The adapter's metricsQuery as a Prometheus recording rule `adapter:queue_us`, with the
    template filled in as prometheus-adapter fills it for a pod metric in our namespace."""
    rules = yaml.safe_load(find("ConfigMap", "triton-adapter-rules")["data"]["config.yaml"])["rules"]
    expr = rules[0]["metricsQuery"].replace("<<.LabelMatchers>>", 'namespace="triton-fastpath"')
    expr = expr.replace("<<.GroupBy>>", "pod")
    path = tmp_path / "rules.yml"
    rule = {"record": "adapter:queue_us", "expr": expr}
    path.write_text(yaml.safe_dump({"groups": [{"name": "adapter", "rules": [rule]}]}))
    return path


def promtool(*args: str) -> subprocess.CompletedProcess:
    found = shutil.which("promtool")
    assert found, "promtool is missing: scripts/bootstrap.sh installs the Debian prometheus package"
    return subprocess.run([found, *args], capture_output=True, text=True, check=False)


def test_the_adapter_query_is_valid_promql(tmp_path: Path) -> None:
    result = promtool("check", "rules", str(adapter_rule_file(tmp_path)))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_adapter_query_is_the_worst_models_queue_time_per_request(tmp_path: Path) -> None:
    """One sentiment request a second runs 5 models (the ensemble and its 4 steps), each counting a
    success; only the encoder queues, 10 ms per request. A ratio of pod-wide sums would report
    10 ms / 5 = 2 ms; the per-model ratio's max reports the 10 ms. Another pod's models, and the
    other namespace's, stay apart. Evaluated by `promtool test rules` on synthetic counters."""
    rules = adapter_rule_file(tmp_path)
    labels = 'namespace="triton-fastpath",pod="{pod}",model="{model}",version="1"'
    steps = ("sentiment", "sentiment_tokenizer", "sentiment_cache", "sentiment_encoder", "sentiment_postprocess")
    series = []
    for model in steps:  # pod a: 1 request/s through every step; the encoder queues 10 ms (150000 us / 15 s)
        queued = "0+150000x20" if model == "sentiment_encoder" else "0+0x20"
        series.append(
            {"series": f"nv_inference_queue_duration_us{{{labels.format(pod='a', model=model)}}}", "values": queued}
        )
        series.append(
            {"series": f"nv_inference_request_success{{{labels.format(pod='a', model=model)}}}", "values": "0+15x20"}
        )
    for model, queued in (("digits", "0+30000x20"), ("embed_encoder", "0+0x20")):  # pod b: 1 ms at most
        series.append(
            {"series": f"nv_inference_queue_duration_us{{{labels.format(pod='b', model=model)}}}", "values": queued}
        )
        series.append(
            {"series": f"nv_inference_request_success{{{labels.format(pod='b', model=model)}}}", "values": "0+30x20"}
        )
    idle = labels.format(pod="b", model="sentiment")  # loaded, never called: 0/0 must not win the max
    series += [
        {"series": f"nv_inference_queue_duration_us{{{idle}}}", "values": "0+0x20"},
        {"series": f"nv_inference_request_success{{{idle}}}", "values": "0+0x20"},
    ]
    tests = {
        "rule_files": [str(rules)],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "15s",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": "adapter:queue_us",
                        "eval_time": "4m",
                        "exp_samples": [
                            {"labels": 'adapter:queue_us{pod="a"}', "value": 10000},
                            {"labels": 'adapter:queue_us{pod="b"}', "value": 1000},
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "adapter_test.yml"
    path.write_text(yaml.safe_dump(tests))
    result = promtool("test", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_disruption_budget_lets_a_drain_evict_one_triton_pod_at_a_time() -> None:
    pdb = find("PodDisruptionBudget", "triton")
    # minAvailable: 1 with the HPA's minReplicas: 1 would allow no eviction at all (drain hangs).
    assert "minAvailable" not in pdb["spec"]
    assert pdb["spec"]["maxUnavailable"] == 1
    min_replicas = find("HorizontalPodAutoscaler", "triton")["spec"]["minReplicas"]
    assert min(pdb["spec"]["maxUnavailable"], min_replicas) == 1  # evictions allowed at the HPA's floor
    assert pdb["spec"]["selector"]["matchLabels"] == find("Deployment", "triton")["spec"]["selector"]["matchLabels"]


def test_no_secret_is_committed_and_passwords_come_from_the_redis_auth_secret() -> None:
    assert not [doc for doc in DOCS if doc["kind"] == "Secret"]
    text = "\n".join(path.read_text() for path in MANIFESTS)
    assert "kubectl -n triton-fastpath create secret generic redis-auth" in text  # how to make it
    for owner, container in containers():
        for env in container.get("env", []):
            if env["name"].endswith("_PASSWORD_FILE"):  # a path to the mounted secret, not the password
                mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
                assert env["value"].startswith(mounts["redis-auth"] + "/"), f"{owner}: {env['value']}"
                volumes = find("Deployment", owner)["spec"]["template"]["spec"]["volumes"]
                secret = next(v for v in volumes if v["name"] == "redis-auth")["secret"]
                assert secret["secretName"] == "redis-auth"
            elif "PASSWORD" in env["name"]:
                assert "value" not in env, f"{owner}: {env['name']} is a literal"
                assert env["valueFrom"]["secretKeyRef"] == {"name": "redis-auth", "key": "password"}
    redis_args = find("Deployment", "redis")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert redis_args[redis_args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"


def test_triton_reaches_redis_through_its_service() -> None:
    env = {e["name"]: e for e in triton_container()["env"]}
    service = find("Service", "redis")
    match = re.fullmatch(r"redis://([\w.-]+):(\d+)/\d+", env["FASTPATH_REDIS_URL"]["value"])
    assert match and match.group(1) == service["metadata"]["name"]
    assert int(match.group(2)) == service["spec"]["ports"][0]["port"]


def test_every_container_requests_cpu_and_memory_and_triton_a_gpu() -> None:
    for owner, container in containers():
        requests = container["resources"]["requests"]
        assert {"cpu", "memory"} <= set(requests), f"{owner}: requests {requests}"
        assert "memory" in container["resources"]["limits"], owner
    resources = triton_container()["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == "1"
    shm = find("Deployment", "triton")["spec"]["template"]["spec"]["volumes"][0]
    assert shm["emptyDir"]["medium"] == "Memory"


def test_locust_workers_reach_the_master_and_run_a_locustfile_of_the_repository() -> None:
    master_service = find("Service", "locust-master")
    for name in ("locust-master", "locust-worker"):
        args = find("Deployment", name)["spec"]["template"]["spec"]["containers"][0]["args"]
        assert (ROOT / args[args.index("-f") + 1].removeprefix("/app/")).is_file()
    worker = find("Deployment", "locust-worker")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert worker[worker.index("--master-host") + 1] == master_service["metadata"]["name"]
    assert {p["port"] for p in master_service["spec"]["ports"]} == {5557, 8089}
